package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestPool(t *testing.T) {
	t.Parallel()
	databases := make(chan string, 2)
	t.Run("Isolated", func(t *testing.T) {
		for _, worker := range []string{"worker-a", "worker-b"} {
			t.Run(worker, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				pool := pgtest.Pool(t)

				var database string
				require.NoError(t, pool.QueryRow(ctx, `SELECT current_database()`).Scan(&database))
				databases <- database

				_, err := pool.Exec(ctx, `INSERT INTO worker (id, host, pid, started_at, heartbeat_at) VALUES ($1, 'host', 1, 0, 0)`, worker)
				require.NoError(t, err, "the migrated schema has table worker")
				rows, err := pool.Query(ctx, `SELECT id FROM worker`)
				require.NoError(t, err)
				ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				require.Equal(t, []string{worker}, ids)
			})
		}
	})
	require.NotEqual(t, <-databases, <-databases)
}

func TestDatabaseURL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgtest.DatabaseURL(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())

	var applied int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM schema_migration`).Scan(&applied))
	require.Positive(t, applied)
	var hasRun bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass('run') IS NOT NULL`).Scan(&hasRun))
	require.True(t, hasRun)
}

// TestRestart is not parallel: parallel tests wait while it restarts the
// server they share, which is how fault-injection tests should run.
func TestRestart(t *testing.T) {
	c := pgtest.Cluster()
	if c == nil {
		t.Skip("the server at MAXQ_TEST_DATABASE_URL is not ours to restart")
	}
	ctx := t.Context()
	url := pgtest.DatabaseURL(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO worker (id, host, pid, started_at, heartbeat_at) VALUES ('w', 'host', 1, 0, 0)`)
	require.NoError(t, err)

	require.NoError(t, c.Restart(ctx))
	require.Error(t, conn.Ping(ctx), "connections do not survive a restart")
	conn, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var workers int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM worker`).Scan(&workers))
	require.Equal(t, 1, workers)
	require.Equal(t, c.URL("postgres"), pgtest.ServerURL("postgres"))
}
