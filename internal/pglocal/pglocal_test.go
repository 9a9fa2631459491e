package pglocal_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/pglocal"
)

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := filepath.Join(tempDir(t), "data")

	c := start(t, dir)
	require.Equal(t, dir, c.Dir())
	require.FileExists(t, filepath.Join(dir, "server.log"))
	var version string
	require.NoError(t, connect(t, c).QueryRow(ctx, `SELECT version()`).Scan(&version))
	require.Contains(t, version, "PostgreSQL")
	_, err := connect(t, c).Exec(ctx, `CREATE TABLE kept (v TEXT); INSERT INTO kept VALUES ('before restart')`)
	require.NoError(t, err)

	port := c.Port()
	require.NoError(t, c.Restart(ctx))
	require.Equal(t, port, c.Port())
	_, err = connect(t, c).Exec(ctx, `INSERT INTO kept VALUES ('after restart')`)
	require.NoError(t, err)

	require.NoError(t, c.Stop(ctx))
	require.NoError(t, c.Stop(ctx), "stopping twice")
	_, err = pgx.Connect(ctx, c.URL("postgres"))
	require.Error(t, err, "connect to a stopped server")

	c = start(t, dir)
	rows, err := connect(t, c).Query(ctx, `SELECT v FROM kept ORDER BY v DESC`)
	require.NoError(t, err)
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"before restart", "after restart"}, kept)
}

func TestStartStopsLeftoverServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := filepath.Join(tempDir(t), "data")

	// The first server stands for one whose parent was killed with SIGKILL.
	leftover := start(t, dir)
	c := start(t, dir)
	require.NotEqual(t, leftover.Port(), c.Port())
	var one int
	require.NoError(t, connect(t, c).QueryRow(ctx, `SELECT 1`).Scan(&one))
	_, err := pgx.Connect(ctx, leftover.URL("postgres"))
	require.Error(t, err, "the leftover server should be gone")
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	dir, err := pglocal.FindBinaries()
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "initdb"))
	require.FileExists(t, filepath.Join(dir, "postgres"))
}

func ExampleStart() {
	ctx := context.Background()
	c, err := pglocal.Start(ctx, pglocal.Options{Dir: "/var/tmp/maxq-dev"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Stop(ctx) //nolint:errcheck // best effort on the way out
	fmt.Println(c.URL("postgres"))
}

// start starts a fast cluster on dir, stopped when t ends.
func start(t *testing.T, dir string) *pglocal.Cluster {
	t.Helper()
	c, err := pglocal.Start(t.Context(), pglocal.Options{Dir: dir, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	return c
}

// connect opens a connection to database postgres, closed when t ends.
func connect(t *testing.T, c *pglocal.Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// tempDir is t.TempDir for a server that may run as user postgres: the
// directories t.TempDir makes are private to us.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pglocal-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}
