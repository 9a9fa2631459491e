package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/maxq-dev/maxq/internal/store"
)

// runScale measures the claim and a burn-down on an empty database, then
// again after seeding it with a million finished steps and a hundred
// thousand blocked ones, as a database that has served for a while holds.
func runScale(ctx context.Context, s *suite) error {
	emptyClaim, err := s.claimLatency(ctx)
	if err != nil {
		return err
	}
	emptyBurn, err := s.burnDown(ctx, "empty", 32, s.size.burnSteps)
	if err != nil {
		return err
	}
	s.statementsCheckpoint(ctx, "scale-empty")
	if err := s.st.truncate(ctx); err != nil {
		return err
	}
	s.progress("scale: seeding %d finished and %d blocked steps", s.size.seedFinished, s.size.seedBlocked)
	start := time.Now()
	if err := s.seed(ctx); err != nil {
		return err
	}
	seeded := time.Since(start)
	s.statementsCheckpoint(ctx, "scale-seeding")
	seededClaim, err := s.claimLatency(ctx)
	if err != nil {
		return err
	}
	seededBurn, err := s.burnDown(ctx, "seeded", 32, s.size.burnSteps)
	if err != nil {
		return err
	}

	s.statementsCheckpoint(ctx, "scale-seeded")

	r := s.report
	r.text("scale", "seeded (floor: the same on an empty database)",
		fmt.Sprintf("%d finished steps in runs of 100, %d blocked steps (pending, deps_left 1) in running runs of 100; insert, VACUUM ANALYZE and CHECKPOINT took %.1f s",
			s.size.seedFinished, s.size.seedBlocked, seeded.Seconds()))
	p50, e50 := seededClaim.pct(50), emptyClaim.pct(50)
	r.versus("scale", fmt.Sprintf("claim latency (10 steps a claim), p50 of %d", len(seededClaim)), p50, e50, "ms").
		target("≤ 1.5× empty", p50 <= 1.5*e50)
	r.versus("scale", "claim latency (10 steps a claim), p99", seededClaim.pct(99), emptyClaim.pct(99), "ms")
	r.versus("scale", fmt.Sprintf("burn-down steps/s, %d steps, 32 at a time", s.size.burnSteps), seededBurn.rate, emptyBurn.rate, "steps/s").
		target("≥ 67% of empty (within 1.5×)", seededBurn.rate >= emptyBurn.rate/1.5)
	r.text("scale", "burn-down CPU, seeded", seededBurn.cpu.perItem(seededBurn.steps, "step"))
	return nil
}

// claimLatency times the worker's claim statement, 10 ready steps at a
// time, with no worker running: the benchmark claims for a worker row of
// its own.
func (s *suite) claimLatency(ctx context.Context) (samples, error) {
	if _, err := s.st.writeFlow(flowSpec{name: "claim", flow: noopScript, steps: sameSteps(noopScript, "work")}); err != nil {
		return nil, err
	}
	n := s.size.claimSamples
	runID, err := s.st.trigger(ctx, "claim")
	if err != nil {
		return nil, err
	}
	if _, err := s.st.schedule(ctx, runID, stageSpec{Stage: "work", Steps: []stepSpec{{Name: "work", Instances: 10 * n}}}); err != nil {
		return nil, err
	}
	// Statistics as autovacuum would soon have them, empty or not: the
	// comparison is of the data, not of how stale the planner's view is.
	if _, err := s.st.pool.Exec(ctx, `ANALYZE step`); err != nil {
		return nil, err
	}
	st := store.New(s.st.pool)
	workerID, err := st.WorkerRegister(ctx, "maxq-bench")
	if err != nil {
		return nil, err
	}
	var lat samples
	for range n {
		start := time.Now()
		claimed, err := st.StepClaim(ctx, store.StepClaimParams{WorkerID: workerID, Limit: 10})
		if err != nil {
			return nil, err
		}
		lat = append(lat, ms(time.Since(start)))
		if len(claimed) != 10 {
			return nil, fmt.Errorf("claimed %d steps, not 10", len(claimed))
		}
	}
	if err := s.st.cancel(ctx, runID); err != nil {
		return nil, err
	}
	return lat, st.WorkerDeregister(ctx, workerID)
}

// seedIDSQL makes IDs that look like MaxQ's: UUIDv7 of a creation time.
const seedIDSQL = `CREATE FUNCTION pg_temp.bench_id(ms bigint, salt text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT substr(lpad(to_hex(ms), 12, '0'), 1, 8) || '-' || substr(lpad(to_hex(ms), 12, '0'), 9, 4)
        || '-7' || substr(md5(salt), 1, 3) || '-8' || substr(md5(salt), 4, 3) || '-' || substr(md5(salt), 7, 12) $$`

// seedFinishedSQL inserts $1 completed runs of one stage of 100 completed
// steps, created from $2 on.
var seedFinishedSQL = []string{
	`INSERT INTO run (id, flow_name, status, created_at, started_at, completed_at, duration_ms)
	 SELECT pg_temp.bench_id(t, 'r' || r), 'seed', 'completed', t, t + 5, t + 200, 195
	 FROM generate_series(0, $1 - 1) r, LATERAL (SELECT $2::bigint + r * 100 AS t) x`,
	`INSERT INTO stage (id, run_id, name, final, status, created_at, completed_at, steps_left)
	 SELECT pg_temp.bench_id(t, 'g' || r), pg_temp.bench_id(t, 'r' || r), 'work', true, 'completed', t + 10, t + 200, 0
	 FROM generate_series(0, $1 - 1) r, LATERAL (SELECT $2::bigint + r * 100 AS t) x`,
	`INSERT INTO step (id, run_id, stage_id, name, sequence, status, depends_on, retry_count, max_retries,
	     created_at, started_at, completed_at, duration_ms, instances, deps_left, ready_at, attempt, exit_code)
	 SELECT pg_temp.bench_id(t, 's' || r || '.' || j), pg_temp.bench_id(t, 'r' || r), pg_temp.bench_id(t, 'g' || r),
	     'work', j, 'completed', '[]', 0, 0, t + 10, t + 20, t + 150, 130, 100, 0, t + 10, 1, 0
	 FROM generate_series(0, $1 - 1) r, generate_series(0, 99) j, LATERAL (SELECT $2::bigint + r * 100 AS t) x`,
}

// seedBlockedSQL inserts $1 running runs of one stage of 100 pending steps
// waiting on a dependency that never completes, created from $2 on.
var seedBlockedSQL = []string{
	`INSERT INTO run (id, flow_name, status, created_at, started_at)
	 SELECT pg_temp.bench_id(t, 'R' || r), 'seed', 'running', t, t + 5
	 FROM generate_series(0, $1 - 1) r, LATERAL (SELECT $2::bigint + r * 1000 AS t) x`,
	`INSERT INTO stage (id, run_id, name, final, status, created_at, steps_left)
	 SELECT pg_temp.bench_id(t, 'G' || r), pg_temp.bench_id(t, 'R' || r), 'work', true, 'running', t + 10, 100
	 FROM generate_series(0, $1 - 1) r, LATERAL (SELECT $2::bigint + r * 1000 AS t) x`,
	`INSERT INTO step (id, run_id, stage_id, name, sequence, status, depends_on, max_retries,
	     created_at, instances, deps_left, ready_at)
	 SELECT pg_temp.bench_id(t, 'S' || r || '.' || j), pg_temp.bench_id(t, 'R' || r), pg_temp.bench_id(t, 'G' || r),
	     'work', j, 'pending', '["gate"]', 0, t + 10, 100, 1, t + 10
	 FROM generate_series(0, $1 - 1) r, generate_series(0, 99) j, LATERAL (SELECT $2::bigint + r * 1000 AS t) x`,
}

// seed inserts the rows in one transaction, then vacuums and analyzes the
// tables as autovacuum would have by then, and checkpoints.
func (s *suite) seed(ctx context.Context) error {
	tx, err := s.st.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	monthAgo := time.Now().Add(-30 * 24 * time.Hour).UnixMilli()
	if _, err := tx.Exec(ctx, seedIDSQL); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	for _, part := range []struct {
		sql  []string
		runs int
	}{{seedFinishedSQL, s.size.seedFinished / 100}, {seedBlockedSQL, s.size.seedBlocked / 100}} {
		for _, q := range part.sql {
			if _, err := tx.Exec(ctx, q, part.runs, monthAgo); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if _, err := s.st.pool.Exec(ctx, `VACUUM ANALYZE run, stage, step`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	// Write the loaded pages out now, not during the measurements: a
	// database at rest, not one still absorbing a bulk load.
	if _, err := s.st.pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
