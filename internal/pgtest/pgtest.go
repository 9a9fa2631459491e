// Package pgtest gives each test its own PostgreSQL database, cloned from a
// template that holds the migrated schema.
//
// A package's TestMain calls Main. Main uses the server at
// MAXQ_TEST_DATABASE_URL when set, else starts a private one with package
// pglocal (durability off) in a temporary directory. It creates the template
// database there, applies the migrations to it, runs the tests, and then
// drops the template and stops the server. DatabaseURL and Pool then cost one
// CREATE DATABASE … TEMPLATE each, so tests can commit, hold competing
// connections and LISTEN freely, in parallel.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/maxq-dev/maxq/internal/migrate"
	"github.com/maxq-dev/maxq/internal/pglocal"
)

const (
	// envURL names the variable that points the tests at an existing server.
	envURL = "MAXQ_TEST_DATABASE_URL"
	// tempPattern names the temporary directories of private servers.
	tempPattern = "maxq-pgtest-"
)

// Set up by Main.
var (
	cluster   *pglocal.Cluster           // nil when using envURL
	serverURL func(dbname string) string // URL of a database on the server
	adminURL  string                     // database to run CREATE and DROP DATABASE in
	template  string                     // migrated template database
	prefix    string                     // of this process's database names
	seq       atomic.Int64               // numbers the test databases
	createMu  sync.Mutex                 // PostgreSQL refuses to copy a template twice at once
)

// Main runs the tests of a package against a migrated template database:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// It exits with the tests' code, or 1 if no server could be had. On SIGINT or
// SIGTERM it stops the server before exiting.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	teardown, err := setup(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	var once sync.Once
	defer once.Do(teardown)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "pgtest: %v: stopping PostgreSQL\n", sig)
		once.Do(teardown)
		os.Exit(1)
	}()
	return m.Run()
}

// setup finds or starts the server and creates the template database. The
// function it returns undoes that.
func setup(ctx context.Context) (_ func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var undo []func()
	teardown := func() {
		for _, f := range slices.Backward(undo) {
			f()
		}
	}
	defer func() {
		if err != nil {
			teardown()
		}
	}()

	if base := os.Getenv(envURL); base != "" {
		adminURL = base
		serverURL = func(dbname string) string { return withDatabase(base, dbname) }
	} else {
		if _, err := pglocal.FindBinaries(); errors.Is(err, pglocal.ErrNoBinaries) {
			// The same one line, naming the variable tests read.
			return nil, errors.New(strings.Replace(err.Error(), "MAXQ_DATABASE_URL", envURL, 1))
		}
		sweepTemp()
		tmp, err := os.MkdirTemp("", tempPattern)
		if err != nil {
			return nil, err
		}
		undo = append(undo, func() { _ = os.RemoveAll(tmp) })
		// The server may run as user postgres (when we are root): let it in.
		if err := os.Chmod(tmp, 0o755); err != nil {
			return nil, err
		}
		c, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(tmp, "data"), Fast: true})
		if err != nil {
			return nil, err
		}
		undo = append(undo, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.Stop(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			}
		})
		cluster, adminURL, serverURL = c, c.URL("postgres"), c.URL
	}

	prefix = fmt.Sprintf("maxq_test_%08x", rand.Uint32())
	template = prefix + "_template"
	if err := admin(ctx, "CREATE DATABASE "+pgx.Identifier{template}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create template database: %w", err)
	}
	undo = append(undo, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, template); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	})
	if err := migrateTemplate(ctx); err != nil {
		return nil, err
	}
	return teardown, nil
}

// migrateTemplate applies the migrations to the template and disconnects, as
// a template must have no connections to be copied.
func migrateTemplate(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, serverURL(template))
	if err != nil {
		return fmt.Errorf("connect to template database: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := migrate.Apply(ctx, conn); err != nil {
		return fmt.Errorf("migrate template database: %w", err)
	}
	return nil
}

// sweepTemp removes what earlier runs left when they died without cleaning
// up (a panic, a timeout): directories over an hour old with no server
// running in them.
func sweepTemp() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPattern+"*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || time.Since(fi.ModTime()) < time.Hour {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// DatabaseURL creates a database for t alone, a copy of the migrated
// template, dropped when t ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	if serverURL == nil {
		t.Fatal("pgtest: no server: TestMain must call pgtest.Main")
	}
	name := fmt.Sprintf("%s_%d", prefix, seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createMu.Lock()
	err := admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
	createMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: create database for %s: %v", t.Name(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return serverURL(name)
}

// Pool returns a pool on a database for t alone (see DatabaseURL), closed
// when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), DatabaseURL(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close) // cleanups run last first: closed before the drop
	return pool
}

// Cluster returns the server Main started, for tests that restart it; nil
// when the tests use MAXQ_TEST_DATABASE_URL.
func Cluster() *pglocal.Cluster { return cluster }

// ServerURL returns the URL of database dbname on the test server.
func ServerURL(dbname string) string { return serverURL(dbname) }

func dropDatabase(ctx context.Context, name string) error {
	if err := admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// admin runs one statement in the maintenance database, on a connection of
// its own so that a restarted server leaves nothing stale behind.
func admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns connection string base with its database set to
// dbname, whether base is a URL or key=value pairs.
func withDatabase(base, dbname string) string {
	if u, err := url.Parse(base); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path, u.RawPath = "/"+dbname, ""
		return u.String()
	}
	return base + " dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(dbname) + "'"
}
