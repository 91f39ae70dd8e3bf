-- A workshop whose sandbox died (its init killed, out of memory, the host restarted) is Dead,
-- with the reason in status_reason, until `atelier workshops resume` starts it again (files kept).
ALTER TABLE workshops DROP CONSTRAINT workshops_status_check;
ALTER TABLE workshops ADD CONSTRAINT workshops_status_check
  CHECK (status IN ('Building', 'Running', 'Suspended', 'Dead', 'Failed', 'Deleting'));
