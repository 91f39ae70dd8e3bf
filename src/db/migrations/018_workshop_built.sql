-- When a workshop's first build finished: a Failed workshop that was built once has files worth
-- keeping, and `atelier workshops resume` starts it again; one that failed during its first build
-- has none (delete it and create it again). Rows from before: every workshop that got past its
-- build (a Failed one only when its recovery after a restart failed).
ALTER TABLE workshops ADD COLUMN built_at timestamptz;
UPDATE workshops SET built_at = created_at
 WHERE status IN ('Running', 'Suspended', 'Dead', 'Deleting')
    OR (status = 'Failed' AND status_reason LIKE 'could not be recovered after a restart:%');
