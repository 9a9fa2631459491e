package api_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The API remembers the flows it has looked up (flow.Cache), but a flow or
// step added or fixed on disk can be used at once.
func TestFlowsChangedOnDisk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	b.schedule(id, "one", false, step("a", 1))

	writeScript(t, filepath.Join(b.root, "demo", "steps", "late", "step.sh"))
	b.schedule(id, "two", false, step("late", 1))
	requireError(t, b.do("POST", "/runs/"+id+"/steps", map[string]any{"stage": "three", "final": false,
		"steps": []any{step("never", 1)}}), 400, "VALIDATION_ERROR")

	requireError(t, b.do("POST", "/flows/new/runs", nil), 404, "NOT_FOUND")
	writeScript(t, filepath.Join(b.root, "new", "flow.sh"))
	b.trigger("new")

	// A flow that cannot be used is looked for again at every request.
	require.NoError(t, os.Chmod(filepath.Join(b.root, "other", "flow.sh"), 0o644))
	requireError(t, b.do("POST", "/flows/other/runs", nil), 404, "NOT_FOUND")
	require.NoError(t, os.Chmod(filepath.Join(b.root, "other", "flow.sh"), 0o755))
	b.trigger("other")
}
