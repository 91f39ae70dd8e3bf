-- A workshop's disk usage against its quota (WorkshopDisk), as its node last read it. Only that
-- node can read it (statfs of the workshop's filesystem): it writes its own workshops' figures
-- with its heartbeat, and every node reads them with the row (docs/replicas.md). Null until the
-- first heartbeat after the workshop was made, or when its node is of a release before this one.
ALTER TABLE workshops ADD COLUMN disk jsonb;
