// Package migrate applies the embedded SQL files of package migrations to a
// database: in order, each file with its version row in one transaction,
// under a transaction-scoped advisory lock so that any number of binaries
// starting at once apply each file exactly once. Applying twice is a no-op.
package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/migrations"
)

// lockKey is the pg_advisory_xact_lock key that serializes migrations
// ("maxq" in ASCII).
const lockKey = 0x6d617871

// Migration is one embedded SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	names, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var out []Migration
	for _, name := range names {
		prefix, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNN_description.up.sql", name)
		}
		version, err := strconv.Atoi(prefix)
		if err != nil {
			return nil, fmt.Errorf("migration %s: version %q is not a number", name, prefix)
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: version, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}

// Conn is what Apply needs: a *pgx.Conn, a *pgxpool.Pool or a *pgxpool.Conn.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Apply brings the database up to the newest embedded migration and returns
// how many files it applied.
func Apply(ctx context.Context, db Conn) (int, error) {
	all, err := Migrations()
	if err != nil {
		return 0, err
	}
	applied := 0
	for _, m := range all {
		done, err := applyOne(ctx, db, m)
		if err != nil {
			return applied, fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
		if done {
			applied++
		}
	}
	return applied, nil
}

func applyOne(ctx context.Context, db Conn, m Migration) (bool, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migration (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return false, err
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migration WHERE version = $1)`, m.Version).Scan(&exists); err != nil {
		return false, err
	}
	if exists {
		return false, tx.Commit(ctx)
	}
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migration (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}
