package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/store"
)

func TestRunWaitForChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	v1 := b.do("GET", "/runs/"+id, nil).must(t, 200)["version"].(string)
	require.NotEmpty(t, v1)

	// Nothing changes: the wait runs out and answers the same version.
	start := time.Now()
	got := b.do("GET", "/runs/"+id+"?waitForChangeMs=400&version="+v1, nil).must(t, 200)
	require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
	require.Equal(t, v1, got["version"])

	// A stage scheduled meanwhile ends the wait early with a new version.
	go func() {
		time.Sleep(300 * time.Millisecond)
		b.schedule(id, "one", false, step("a", 1))
	}()
	start = time.Now()
	got = b.do("GET", "/runs/"+id+"?waitForChangeMs=10000&version="+v1, nil).must(t, 200)
	require.Less(t, time.Since(start), 5*time.Second)
	require.NotEqual(t, v1, got["version"])
	require.Len(t, list(got, "stages"), 1)

	// A stale version answers at once.
	start = time.Now()
	b.do("GET", "/runs/"+id+"?waitForChangeMs=10000&version="+v1, nil).must(t, 200)
	require.Less(t, time.Since(start), time.Second)

	requireError(t, b.do("GET", "/runs/"+id+"?waitForChangeMs=600000", nil), 400, "VALIDATION_ERROR")
	requireError(t, b.do("GET", "/runs/"+id+"?waitForChangeMs=-1", nil), 400, "VALIDATION_ERROR")
}

func TestLogList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	body := b.schedule(id, "one", false, step("a", 2))
	steps := list(body, "steps")
	s0 := steps[0].(map[string]any)["id"].(string)
	s1 := steps[1].(map[string]any)["id"].(string)
	var lines []store.LogLine
	for i := 0; i < 5; i++ {
		for _, sid := range []string{s0, s1} {
			lines = append(lines, store.LogLine{RunID: id, StepID: sid, Level: "info", Message: fmt.Sprintf("%s line %d", sid[len(sid)-4:], i), CreatedAt: int64(i)})
		}
	}
	require.NoError(t, b.store.LogAppend(context.Background(), lines))

	// Lines show once every older transaction on the server has ended.
	var all map[string]any
	require.Eventually(t, func() bool {
		all = b.do("GET", "/runs/"+id+"/logs", nil).must(t, 200)
		return len(list(all, "logs")) == 10
	}, 5*time.Second, 20*time.Millisecond)
	first := list(all, "logs")[0].(map[string]any)
	require.Equal(t, "a", first["stepName"])
	require.Equal(t, 0.0, first["sequence"])

	page := b.do("GET", "/runs/"+id+"/logs?stepId="+s1+"&limit=2", nil).must(t, 200)
	got := list(page, "logs")
	require.Len(t, got, 2)
	require.Equal(t, s1[len(s1)-4:]+" line 0", got[0].(map[string]any)["message"])
	next := page["next"].(string)
	page = b.do("GET", fmt.Sprintf("/runs/%s/logs?stepId=%s&after=%s", id, s1, next), nil).must(t, 200)
	got = list(page, "logs")
	require.Len(t, got, 3)
	require.Equal(t, s1[len(s1)-4:]+" line 2", got[0].(map[string]any)["message"])
	last := page["next"].(string)
	page = b.do("GET", fmt.Sprintf("/runs/%s/logs?after=%s", id, last), nil).must(t, 200)
	require.Empty(t, list(page, "logs"))
	require.Equal(t, last, page["next"], "the cursor stays put when nothing is new")

	requireError(t, b.do("GET", "/runs/0190a3c0-0000-7000-8000-000000000000/logs", nil), 404, "NOT_FOUND")
	requireError(t, b.do("GET", "/runs/"+id+"/logs?after=-1", nil), 400, "VALIDATION_ERROR")
	requireError(t, b.do("GET", "/runs/"+id+"/logs?after=12", nil), 400, "VALIDATION_ERROR")
	requireError(t, b.do("GET", "/runs/"+id+"/logs?after=1.x", nil), 400, "VALIDATION_ERROR")
	requireError(t, b.do("GET", "/runs/"+id+"/logs?limit=0", nil), 400, "VALIDATION_ERROR")
}

// A line whose transaction commits after a later-numbered line's still
// comes after the cursor a reader already holds: readers follow commit
// order and never read past a transaction still running.
func TestLogListFollowsCommitOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	sid := list(b.schedule(id, "one", false, step("a", 1)), "steps")[0].(map[string]any)["id"].(string)
	ctx := context.Background()

	slow, err := b.store.Pool().Begin(ctx)
	require.NoError(t, err)
	defer slow.Rollback(ctx) //nolint:errcheck
	_, err = slow.Exec(ctx, `INSERT INTO log (id, run_id, step_id, level, message, created_at)
		VALUES (gen_random_uuid()::text, $1, $2, 'info', 'first written, last committed', 0)`, id, sid)
	require.NoError(t, err)
	require.NoError(t, b.store.LogAppend(ctx, []store.LogLine{{RunID: id, StepID: sid, Level: "info", Message: "committed first"}}))

	// While the slow transaction runs, the committed line is held back.
	page := b.do("GET", "/runs/"+id+"/logs", nil).must(t, 200)
	require.Empty(t, list(page, "logs"))
	cursor := page["next"].(string)

	require.NoError(t, slow.Commit(ctx))
	// Transactions of other tests on the server may hold the horizon back
	// for a moment.
	var got []string
	require.Eventually(t, func() bool {
		page = b.do("GET", "/runs/"+id+"/logs?after="+cursor, nil).must(t, 200)
		got = nil
		for _, l := range list(page, "logs") {
			got = append(got, l.(map[string]any)["message"].(string))
		}
		return len(got) == 2
	}, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"first written, last committed", "committed first"}, got)
}
