-- Commands started through the async exec API (`POST /v1/workshops/:id/execs`, the MCP tools):
-- their state and their output, written as it is produced, so a client that went away reads it
-- later. Removed with their workshop, and some days after they end.
CREATE TABLE execs (
  id            text PRIMARY KEY,
  workshop_id   text NOT NULL REFERENCES workshops(id) ON DELETE CASCADE,
  actor_id      text NOT NULL,
  command       jsonb NOT NULL,
  -- Running | Exited | Failed | Lost (the server stopped following it)
  status        text NOT NULL,
  exit_code     integer,
  signal        text,
  error         jsonb,
  output_bytes  bigint NOT NULL DEFAULT 0,
  truncated     boolean NOT NULL DEFAULT false,
  -- the server process that follows it: a Running row of another instance was lost
  instance      text NOT NULL,
  started_at    timestamptz NOT NULL DEFAULT now(),
  ended_at      timestamptz
);
CREATE INDEX execs_workshop ON execs (workshop_id);
CREATE INDEX execs_ended ON execs (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE exec_output (
  exec_id       text NOT NULL REFERENCES execs(id) ON DELETE CASCADE,
  -- byte offset of this chunk in the command's combined output (stdout and stderr interleaved)
  byte_offset   bigint NOT NULL,
  stream        text NOT NULL,
  data          bytea NOT NULL,
  PRIMARY KEY (exec_id, byte_offset)
);
