-- Simulators of a workshop (throwaway postgres, redis…): what was asked, the running process,
-- its state. They go with the workshop (ON DELETE CASCADE once their processes are stopped).
CREATE TABLE workshop_simulators (
  workshop_id   text NOT NULL REFERENCES workshops (id) ON DELETE CASCADE,
  name          text NOT NULL,
  type          text NOT NULL,
  request       jsonb NOT NULL,
  handle        jsonb,
  status        text NOT NULL CHECK (status IN ('Starting', 'Running', 'Failed')),
  status_reason text,
  restarts      integer NOT NULL DEFAULT 0,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workshop_id, name)
);

-- The workshop's own agent token (ATELIER_TOKEN inside it), sealed with the server's master key;
-- its row in api_tokens goes with the workshop.
ALTER TABLE workshops ADD COLUMN agent_token text;
