package bench_test

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/bench"
)

// TestMain lets the test binary be the workers the benchmark starts.
func TestMain(m *testing.M) {
	if bench.IsWorker() {
		os.Exit(bench.WorkerMain())
	}
	os.Exit(m.Run())
}

// TestSmoke runs every scenario at its quick size, end to end, so that the
// benchmark keeps working. It checks that each scenario produced figures,
// not what they are: timings belong in the benchmark, not in tests.
func TestSmoke(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts PostgreSQL and runs every scenario")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress strings.Builder
	report, err := bench.Run(ctx, bench.Options{Quick: true, Fast: true, Progress: &progress})
	require.NoError(t, err, progress.String())

	var table strings.Builder
	report.Print(&table)
	t.Log("\n" + table.String())
	for _, sc := range bench.Scenarios() {
		var figures int
		for _, row := range report.Rows {
			if row.Scenario != sc[0] || row.Text != "" {
				continue
			}
			figures++
			require.False(t, math.IsNaN(row.Value) || math.IsInf(row.Value, 0), "%s: %s is %v", row.Scenario, row.Figure, row.Value)
		}
		require.Positive(t, figures, "scenario %s reported no figure", sc[0])
	}
}
