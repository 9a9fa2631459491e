package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/maxq-dev/maxq/internal/core"
)

// NotifyChannel is the LISTEN/NOTIFY channel on which transactions that make
// work ready wake the workers.
const NotifyChannel = "maxq_work"

// Store is MaxQ's state in PostgreSQL.
type Store struct {
	pool *pgxpool.Pool
	// Now returns the current time; tests replace it to move the clock.
	Now func() time.Time
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, Now: time.Now}
}

// Pool is the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func (s *Store) nowMillis() int64 { return s.Now().UnixMilli() }

// newID returns a time-ordered UUID (v7) string.
func newID() string { return uuid.Must(uuid.NewV7()).String() }

// validID reports whether id can name a row: every ID MaxQ hands out is a
// UUID, so anything else is simply not found.
func validID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil && len(id) == 36
}

// inTx runs fn in a transaction, retrying it when PostgreSQL reports a
// deadlock or a serialization failure, which two workers completing steps of
// the same DAG at once can cause.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, s.pool, fn)
		if err == nil || attempt >= 5 || !retryable(err) {
			return interpretError(err)
		}
	}
}

// Rejected reports whether PostgreSQL itself refused a statement (a
// constraint, a bad value), as opposed to the connection failing: trying
// the same again would fail the same way.
func Rejected(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && !retryable(err)
}

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// interpretError maps PostgreSQL errors onto core's sentinels: no rows is
// ErrNotFound, a unique violation ErrConflict, and a data exception (a value
// PostgreSQL cannot store, such as an out-of-range number) ErrInvalid.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return core.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505":
			return fmt.Errorf("%w: %s", core.ErrConflict, pgErr.Detail)
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "22", pgErr.Code == "54001":
			return fmt.Errorf("%w: %s", core.ErrInvalid, pgErr.Message)
		}
	}
	return err
}

// notify wakes the workers when the transaction commits. PostgreSQL folds
// identical notifications of one transaction into one.
func notify(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, NotifyChannel)
	return err
}

// Page is a slice of a longer list.
type Page struct {
	Limit     int
	Offset    int
	SortBy    string // a column name the caller validated against its list
	SortOrder string // "asc" or "desc"
}

func (p Page) orderBy(columns map[string]string) string {
	col, ok := columns[p.SortBy]
	if !ok {
		col = columns[""]
	}
	dir := "ASC"
	if p.SortOrder == "desc" {
		dir = "DESC"
	}
	return " ORDER BY " + col + " " + dir + ", id " + dir
}

// jsonText encodes v for a jsonb parameter; nil maps and slices become
// their empty JSON forms rather than null.
func jsonText(v any) (string, error) {
	switch x := v.(type) {
	case map[string]string:
		if x == nil {
			return "{}", nil
		}
	case []string:
		if x == nil {
			return "[]", nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return string(b), nil
}

func isNotFound(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
