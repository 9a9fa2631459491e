-- Log tailing follows commit order, not insertion order: a line's seq is
-- taken when it is inserted, but a batch with lower seqs can commit after
-- one with higher seqs, and a reader that had moved past the higher ones
-- would never see the lower. A reader instead orders lines by the ID of the
-- transaction that wrote them, and reads only transactions older than every
-- one still running, so nothing can later appear behind its cursor.
ALTER TABLE log ADD COLUMN xact_id xid8 NOT NULL DEFAULT pg_current_xact_id();
DROP INDEX idx_log_run_id;
DROP INDEX idx_log_step_id;
CREATE INDEX idx_log_run_cursor ON log (run_id, xact_id, seq);
CREATE INDEX idx_log_step_cursor ON log (step_id, xact_id, seq);
