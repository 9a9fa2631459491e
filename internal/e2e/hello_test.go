package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHelloWorld(t *testing.T) {
	t.Parallel()
	s := newStack(t, examplesRoot(t), options{})
	id := s.trigger("hello_world", nil)
	run := s.wait(id, 30*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	require.Len(t, run.Stages, 2)
	steps := s.steps(id)
	require.Len(t, steps, 2)
	for _, st := range steps {
		require.Equal(t, "completed", st.Status)
	}
	var arts struct {
		Artifacts []struct {
			FullPath string         `json:"fullPath"`
			Value    map[string]any `json:"value"`
		}
	}
	require.Equal(t, 200, s.call("GET", "/runs/"+id+"/artifacts", nil, &arts))
	require.Len(t, arts.Artifacts, 1)
	require.Equal(t, "greet[0]/greeting", arts.Artifacts[0].FullPath)
	require.Equal(t, "Hello, World!", arts.Artifacts[0].Value["message"])

	// What goodbye printed is in the log table.
	var lines []string
	rows, err := s.Store.Pool().Query(t.Context(), `SELECT message FROM log l JOIN step s ON s.id = l.step_id
		WHERE l.run_id = $1 AND s.name = 'goodbye' ORDER BY seq`, id)
	require.NoError(t, err)
	for rows.Next() {
		var m string
		require.NoError(t, rows.Scan(&m))
		lines = append(lines, m)
	}
	require.Equal(t, "Previous greeting was: Hello, World!\nGoodbye!", strings.Join(lines, "\n"))
}
