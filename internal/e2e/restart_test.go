package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/pgtest"
)

// TestPostgresRestart stops PostgreSQL in the middle of a run and starts it
// again: meanwhile the API answers errors at once, and afterwards the API
// and the worker reconnect and the run completes, every step run.
//
// It is not parallel: it restarts the server every test of this package
// shares, and Go runs the parallel tests only after the others are done.
func TestPostgresRestart(t *testing.T) {
	cluster := pgtest.Cluster()
	if cluster == nil {
		t.Skip("MAXQ_TEST_DATABASE_URL is set: the server is not ours to restart")
	}
	rec := newRecorder(t)
	done := filepath.Join(rec.dir, "done")
	root := flowDir(t, "steady", `[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleSh("all", true, `[{"name":"tick","instances":200,"maxRetries":3}]`),
		map[string]string{"tick": "sleep 0.02\necho \"$MAXQ_STEP_ID\" >> " + done + "\n"})
	s := newStack(t, root, options{})
	id := s.trigger("steady", nil)

	completed := func() int {
		data, err := os.ReadFile(done)
		if err != nil {
			return 0
		}
		return strings.Count(string(data), "\n")
	}
	require.Eventually(t, func() bool { return completed() >= 20 }, 30*time.Second, 5*time.Millisecond)

	// Stop, look at the API while the server is down, then start it again
	// (what Restart does, with a window to look through).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			require.NoError(t, cluster.Restart(context.Background()), "the shared server must be left running")
		}
	})
	require.NoError(t, cluster.Stop(ctx))
	atStop := completed()
	require.Less(t, atStop, 200, "the server went down in the middle of the run")
	client := &http.Client{Timeout: 20 * time.Second}
	for _, path := range []string{"/runs/" + id, "/runs/" + id + "/steps", "/runs"} {
		start := time.Now()
		res, err := client.Get(s.API + path)
		require.NoError(t, err, "GET %s answers while the database is down", path)
		var body struct {
			Code  string `json:"code"`
			Error string `json:"error"`
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
		require.NoError(t, res.Body.Close())
		require.Less(t, time.Since(start), 10*time.Second, "GET %s fails fast, it does not hang", path)
		require.Equal(t, http.StatusInternalServerError, res.StatusCode, "GET %s", path)
		require.Equal(t, "INTERNAL_ERROR", body.Code)
		require.Equal(t, "internal error", body.Error, "no database detail leaks out")
	}
	require.NoError(t, cluster.Restart(ctx))
	restarted = true
	t.Logf("%d of 200 steps had run when PostgreSQL stopped, %d when it was back", atStop, completed())

	// The API reconnects: a stale pooled connection may fail one request.
	require.Eventually(t, func() bool {
		res, err := client.Get(s.API + "/runs/" + id)
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "GET /runs/{id} succeeds after the restart")

	run := s.wait(id, 60*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	steps := s.steps(id)
	require.Len(t, steps, 200)
	require.Equal(t, map[string]int{"completed": 200}, byStatus(steps), "no step failed")
	data, err := os.ReadFile(done)
	require.NoError(t, err)
	ran := map[string]bool{}
	for _, line := range strings.Fields(string(data)) {
		ran[line] = true
	}
	for _, st := range steps {
		require.True(t, ran[st.ID], "tick[%d] ran", st.Sequence)
	}
	require.Len(t, ran, 200, "only this run's steps ran")
}
