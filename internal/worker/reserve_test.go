package worker

import (
	"testing"

	"github.com/stretchr/testify/require"
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
