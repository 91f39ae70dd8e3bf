-- Each node's own heartbeat interval and dead-after timeout (ATELIER_NODE_HEARTBEAT,
-- ATELIER_NODE_DEAD_AFTER), shown by `atelier nodes list`: a node set unlike the others is seen.
-- Null for a node of an older release (it uses the defaults, 2 s and 10 s).
ALTER TABLE nodes ADD COLUMN heartbeat_ms integer;
ALTER TABLE nodes ADD COLUMN dead_after_ms integer;

-- Nodes taken out of the installation by `atelier nodes remove` (docs/replicas.md). Their
-- workshops keep their rows (node_id names the removed node): shown NodeUnreachable with this
-- name and date, deletable from any node. A removed node started again joins again, and its row
-- here goes.
CREATE TABLE removed_nodes (
  id text PRIMARY KEY,
  name text NOT NULL,
  address text NOT NULL,
  version text NOT NULL,
  last_heartbeat_at timestamptz NOT NULL,
  removed_at timestamptz NOT NULL DEFAULT now(),
  removed_by text NOT NULL
);
