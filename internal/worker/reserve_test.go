package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
)

// The finisher reserves only slots that are free and not reserved already,
// and a stopping worker reserves none: a claim made with a result can never
// take the worker past MaxSteps or MaxFlows.
func TestReserveTakesOnlyFreeSlots(t *testing.T) {
	t.Parallel()
	w := New(Config{MaxSteps: 3, MaxFlows: 1})
	w.steps["running"] = &running{stop: func() {}}

	steps, calls := w.reserve(5, 5)
	require.Equal(t, 2, steps, "3 slots, 1 running")
	require.Equal(t, 1, calls)
	steps, calls = w.reserve(5, 5)
	require.Zero(t, steps, "the rest is reserved")
	require.Zero(t, calls)

	w.unreserve(2, 1)
	steps, _ = w.reserve(1, 0)
	require.Equal(t, 1, steps, "asked for one")
	w.unreserve(1, 0)

	w.stopping = true
	steps, calls = w.reserve(5, 5)
	require.Zero(t, steps, "a stopping worker starts nothing more")
	require.Zero(t, calls)
}

// The claim loop holds the free slots while its claim runs, so a batch of
// results recorded meanwhile cannot claim into the same slots: the two
// claims together never take the worker past MaxSteps.
func TestFillReservesSlotsWhileClaiming(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	w := New(Config{Store: st, MaxSteps: 3, MaxFlows: 1})
	id, err := st.WorkerRegister(ctx, "test")
	require.NoError(t, err)
	w.id = id

	// Hold the claim inside the database: it waits for the step table.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `LOCK TABLE step IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	filled := make(chan struct{})
	go func() {
		defer close(filled)
		w.fill(ctx, ctx)
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 5*time.Millisecond, "the claim never waited for the lock")

	steps, calls := w.reserve(3, 1)
	require.Zero(t, steps, "the claim in flight holds every free step slot")
	require.Zero(t, calls, "and the flow call slot")

	require.NoError(t, tx.Rollback(ctx))
	<-filled
	steps, calls = w.reserve(3, 1)
	require.Equal(t, 3, steps, "a claim that found nothing gives its slots back")
	require.Equal(t, 1, calls)
}
