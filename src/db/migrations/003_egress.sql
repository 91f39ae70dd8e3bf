-- Egress: each workshop's policy (the project's `egress:` block, then live additions such as an
-- approved domain), and every decision its proxy made.
ALTER TABLE workshops ADD COLUMN egress jsonb NOT NULL DEFAULT '{"allow": [], "deny": []}';

CREATE TABLE egress_decisions (
  id            bigserial PRIMARY KEY,
  workshop_id   text NOT NULL REFERENCES workshops(id) ON DELETE CASCADE,
  at            timestamptz NOT NULL,
  protocol      text NOT NULL,
  host          text NOT NULL,
  port          integer NOT NULL,
  allowed       boolean NOT NULL,
  outcome       text NOT NULL,
  reason        text NOT NULL,
  message       text NOT NULL,
  entry         text,
  address       text,
  approval_id   text
);
CREATE INDEX egress_decisions_workshop ON egress_decisions (workshop_id, id);
