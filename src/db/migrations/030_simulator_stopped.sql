-- A simulator stopped by hand (the dashboard's or the CLI's stop): its process ended, its files
-- kept; a reset starts it again. Neither the watchdog nor a workshop's resume restarts it.
ALTER TABLE workshop_simulators DROP CONSTRAINT workshop_simulators_status_check;
ALTER TABLE workshop_simulators ADD CONSTRAINT workshop_simulators_status_check CHECK (status IN ('Starting', 'Running', 'Failed', 'Stopped'));
