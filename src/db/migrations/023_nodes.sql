-- The nodes of an installation: every server sharing this database (docs/replicas.md).
CREATE TABLE nodes (
  id text PRIMARY KEY,                   -- DATA_DIR/node-id: what workshops.node_id names
  name text NOT NULL UNIQUE,             -- --node-name
  address text NOT NULL,                 -- where the other nodes reach its API
  version text NOT NULL,
  protocol integer NOT NULL,             -- the node-to-node protocol it speaks
  min_protocol integer NOT NULL,         -- the oldest protocol it still talks to
  schema_version text NOT NULL,          -- its newest migration
  memory_total_bytes bigint NOT NULL DEFAULT 0,
  memory_free_bytes bigint NOT NULL DEFAULT 0,
  workshops integer NOT NULL DEFAULT 0,
  draining boolean NOT NULL DEFAULT false,
  key_sealed text NOT NULL,              -- its node-to-node HMAC key, sealed with the master key
  joined_at timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- Why the workshop runs where it does (`workshops status`).
ALTER TABLE workshops ADD COLUMN placement text;
