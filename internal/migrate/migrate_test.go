package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/migrate"
	"github.com/maxq-dev/maxq/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestMigrations(t *testing.T) {
	t.Parallel()
	all, err := migrate.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, all)
	for i, m := range all {
		require.Positive(t, m.Version, m.Name)
		require.Regexp(t, `^\d+_[a-z0-9_]+\.up\.sql$`, m.Name)
		require.NotEmpty(t, m.SQL, m.Name)
		if i > 0 {
			require.Greater(t, m.Version, all[i-1].Version, "in version order")
		}
	}
}

// The template every test database is copied from is already migrated:
// applying again changes nothing.
func TestApplyMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	n, err := migrate.Apply(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, allVersions(t), versions(t, pool))
}

func TestApplyEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, emptyDatabase(t))
	require.Empty(t, tables(t, conn))

	n, err := migrate.Apply(ctx, conn)
	require.NoError(t, err)
	require.Equal(t, len(allVersions(t)), n)
	require.Equal(t, allVersions(t), versions(t, conn))

	n, err = migrate.Apply(ctx, conn)
	require.NoError(t, err)
	require.Zero(t, n, "applying twice is a no-op")
	require.Equal(t, allVersions(t), versions(t, conn))

	// The result is the schema every other test runs on.
	require.Equal(t, tables(t, pgtest.Pool(t)), tables(t, conn))
}

// Binaries starting at once each apply what is missing: every file exactly
// once, and none of them fails.
func TestApplyConcurrent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := emptyDatabase(t)
	const n = 8
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		conns[i] = connect(t, url)
	}

	start := make(chan struct{})
	applied := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			applied[i], errs[i] = migrate.Apply(ctx, conn)
		}()
	}
	close(start)
	wg.Wait()

	total := 0
	for i := range n {
		require.NoError(t, errs[i], "Apply %d", i)
		total += applied[i]
	}
	require.Equal(t, len(allVersions(t)), total, "each file applied once in all")
	var rows, distinct int
	require.NoError(t, conns[0].QueryRow(ctx, `SELECT count(*), count(DISTINCT version) FROM schema_migration`).Scan(&rows, &distinct))
	require.Equal(t, len(allVersions(t)), rows)
	require.Equal(t, rows, distinct)
	require.Equal(t, allVersions(t), versions(t, conns[0]))
}

// querier is what the helpers read with: a connection or a pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func allVersions(t *testing.T) []int {
	t.Helper()
	all, err := migrate.Migrations()
	require.NoError(t, err)
	out := make([]int, len(all))
	for i, m := range all {
		out[i] = m.Version
	}
	return out
}

func versions(t *testing.T, db querier) []int {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT version FROM schema_migration ORDER BY version`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return out
}

func tables(t *testing.T, db querier) []string {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// emptyDatabase creates a database with no schema at all (not a copy of
// pgtest's migrated template), dropped when t ends, and returns its URL.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("maxq_migrate_test_%08x", rand.Uint32())
	admin := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgtest.ServerURL("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		// Another CREATE DATABASE copying template1 at the same moment makes
		// PostgreSQL refuse with object_in_use: try again.
		for attempt := 0; ; attempt++ {
			_, err = conn.Exec(ctx, sql)
			var pgErr *pgconn.PgError
			if err == nil || attempt == 20 || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	require.NoError(t, admin("CREATE DATABASE "+pgx.Identifier{name}.Sanitize()))
	t.Cleanup(func() {
		require.NoError(t, admin("DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"))
	})
	return pgtest.ServerURL(name)
}
