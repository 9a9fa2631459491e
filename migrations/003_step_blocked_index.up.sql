-- Completing a step releases the pending steps of its run that depend on
-- it; this index holds just the blocked ones, so that search does not scan
-- the run's other steps or every pending step of the table.
CREATE INDEX idx_step_blocked ON step (run_id) WHERE status = 'pending' AND deps_left > 0;
