package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/store"
)

// storedLine is a row of the log table.
type storedLine struct {
	ID, RunID, Level, Message string
	StepID, FlowCallID        *string
	Data                      json.RawMessage
	CreatedAt                 int64
}

func (f *fixture) logLines(runID string) []storedLine {
	rows, err := f.s.Pool().Query(f.ctx, `SELECT id, run_id, level, message, step_id, flow_call_id, data, created_at
		FROM log WHERE run_id = $1 ORDER BY seq`, runID)
	require.NoError(f.t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowToStructByPos[storedLine])
	require.NoError(f.t, err)
	return lines
}

// A batch of lines of several streams is written in the order the lines
// were added, each with its stream's columns; lines of an attempt that is
// not the current one are dropped.
func TestLogWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID := f.run(false, store.StepSpec{Name: "a", Instances: 2})
	claimed, err := f.s.Claim(f.ctx, store.ClaimParams{Flows: 1, StepClaimParams: store.StepClaimParams{WorkerID: f.worker, Limit: 10}})
	require.NoError(t, err)
	require.Len(t, claimed.Steps, 2)
	call := claimed.Calls[0]
	a0, a1 := claimed.Steps[0], claimed.Steps[1]

	b := store.NewLogBatch(4, 64)
	stdout := b.AddSource(store.LogSource{RunID: runID, StepID: a0.ID, Attempt: a0.Attempt, Level: "info",
		Data: json.RawMessage(`{"stream":"stdout"}`)})
	stderr := b.AddSource(store.LogSource{RunID: runID, StepID: a0.ID, Attempt: a0.Attempt, Level: "error"})
	stale := b.AddSource(store.LogSource{RunID: runID, StepID: a1.ID, Attempt: a1.Attempt + 1, Level: "info"})
	flow := b.AddSource(store.LogSource{RunID: runID, FlowCallID: call.ID, Attempt: call.Attempt, Level: "info"})
	long := strings.Repeat("é", 40_000) // longer than COPY's chunks and than the batch was sized for
	b.Add(stdout, []byte("one"), 1)
	b.Add(stale, []byte("superseded"), 2)
	b.Add(stderr, []byte("two"), 3)
	b.Add(flow, []byte("three"), 4)
	b.Add(stdout, []byte(long), 5)
	b.Add(stdout, []byte(""), 6)
	require.Equal(t, 6, b.Len())
	require.Equal(t, 3+10+3+5+len(long), b.Size())
	require.NoError(t, f.s.LogWrite(f.ctx, b))

	got := f.logLines(runID)
	require.Len(t, got, 5)
	var messages []string
	for _, l := range got {
		messages = append(messages, l.Message)
		require.Equal(t, runID, l.RunID)
		id, err := uuid.Parse(l.ID)
		require.NoError(t, err)
		require.Equal(t, uuid.Version(7), id.Version())
		require.Equal(t, uuid.RFC4122, id.Variant())
	}
	require.Equal(t, []string{"one", "two", "three", long, ""}, messages)
	require.Equal(t, []int64{1, 3, 4, 5, 6}, []int64{got[0].CreatedAt, got[1].CreatedAt, got[2].CreatedAt, got[3].CreatedAt, got[4].CreatedAt})
	require.Equal(t, a0.ID, *got[0].StepID)
	require.Nil(t, got[0].FlowCallID)
	require.Equal(t, "info", got[0].Level)
	require.JSONEq(t, `{"stream":"stdout"}`, string(got[0].Data))
	require.Equal(t, "error", got[1].Level)
	require.Nil(t, got[1].Data)
	require.Nil(t, got[2].StepID)
	require.Equal(t, call.ID, *got[2].FlowCallID)
	require.NotEqual(t, got[0].ID, got[3].ID)

	// Reset keeps nothing of the last batch.
	b.Reset()
	require.Zero(t, b.Len())
	require.Zero(t, b.Size())
	src := b.AddSource(store.LogSource{RunID: runID, StepID: a1.ID, Attempt: a1.Attempt, Level: "info"})
	b.Add(src, []byte("again"), 7)
	require.NoError(t, f.s.LogWrite(f.ctx, b))
	got = f.logLines(runID)
	require.Len(t, got, 6)
	require.Equal(t, "again", got[5].Message)
	require.Equal(t, a1.ID, *got[5].StepID)

	// A batch of superseded attempts only writes nothing.
	b.Reset()
	src = b.AddSource(store.LogSource{RunID: runID, StepID: a1.ID, Attempt: a1.Attempt + 1, Level: "info"})
	b.Add(src, []byte("dropped"), 8)
	require.NoError(t, f.s.LogWrite(f.ctx, b))
	require.Len(t, f.logLines(runID), 6)
}

// LogAppend writes lines given whole, each with its own columns.
func TestLogAppend(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID := f.run(false, store.StepSpec{Name: "a", Instances: 1})
	c := f.claim(1)[0]
	line := func(msg, level string, attempt int) store.LogLine {
		return store.LogLine{RunID: runID, StepID: c.ID, Attempt: attempt, Level: level, Message: msg, CreatedAt: 9}
	}
	require.NoError(t, f.s.LogAppend(f.ctx, []store.LogLine{
		line("a", "info", c.Attempt), line("b", "error", c.Attempt), line("c", "info", c.Attempt+1), line("d", "info", c.Attempt),
	}))
	require.NoError(t, f.s.LogAppend(f.ctx, nil))
	var messages, levels []string
	for _, l := range f.logLines(runID) {
		messages = append(messages, l.Message)
		levels = append(levels, l.Level)
	}
	require.Equal(t, []string{"a", "b", "d"}, messages)
	require.Equal(t, []string{"info", "error", "info"}, levels)
}

// Adding a line to a batch with room for it allocates nothing. (Not
// parallel: AllocsPerRun counts the whole process's allocations.)
func TestLogBatchAddDoesNotAllocate(t *testing.T) {
	b := store.NewLogBatch(100, 100*100)
	src := b.AddSource(store.LogSource{RunID: "r", StepID: "s", Level: "info"})
	msg := []byte(strings.Repeat("x", 99))
	allocs := testing.AllocsPerRun(50, func() { b.Add(src, msg, 1) })
	require.Zero(t, allocs)
}

// fullBatch is a batch of lines lines of a step's stdout, 99 bytes each.
func (f *fixture) fullBatch(lines int) (*store.LogBatch, string) {
	runID := f.run(false, store.StepSpec{Name: "a", Instances: 1})
	c := f.claim(1)[0]
	b := store.NewLogBatch(lines, lines*99)
	src := b.AddSource(store.LogSource{RunID: runID, StepID: c.ID, Attempt: c.Attempt, Level: "info",
		Data: json.RawMessage(`{"stream":"stdout","attempt":1}`)})
	msg := []byte(strings.Repeat("x", 99))
	for range lines {
		b.Add(src, msg, 1)
	}
	return b, runID
}

// Writing a batch allocates a few objects whatever the number of lines in
// it, and grows none of the batch's buffers, so a worker's memory does not
// grow with what its scripts print. (Not parallel: AllocsPerRun counts the
// whole process's allocations.)
func TestLogWriteAllocatesPerBatchNotPerLine(t *testing.T) {
	f := newFixture(t)
	b, runID := f.fullBatch(1000)
	write := func() {
		ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
		defer cancel()
		require.NoError(t, f.s.LogWrite(ctx, b))
	}
	write() // the connection's first statements allocate once
	capacity := b.Capacity()
	allocs := testing.AllocsPerRun(10, write)
	require.LessOrEqual(t, allocs, 25.0, "a write of %d lines", b.Len())
	require.Equal(t, capacity, b.Capacity())
	require.Len(t, f.logLines(runID), 12*b.Len()) // AllocsPerRun's warm-up, and the first write
}

// ctx's deadline bounds a write, and only that write: one the server
// holds up fails at the deadline, and one that finishes leaves its
// connection in the pool without the deadline.
func TestLogWriteDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b, runID := f.fullBatch(10)
	cfg := f.s.Pool().Config()
	cfg.MaxConns = 1 // every statement on the connection the write used
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	s := store.New(pool)

	ctx, cancel := context.WithTimeout(f.ctx, 3*time.Second)
	defer cancel()
	require.NoError(t, s.LogWrite(ctx, b))
	deadline, _ := ctx.Deadline()
	_, err = pool.Exec(f.ctx, `SELECT pg_sleep($1)`, (time.Until(deadline) + 200*time.Millisecond).Seconds())
	require.NoError(t, err, "a statement past the write's deadline")
	require.Len(t, f.logLines(runID), b.Len())

	tx, err := f.s.Pool().Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(f.ctx) }()
	_, err = tx.Exec(f.ctx, `LOCK TABLE log IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	ctx, cancel = context.WithTimeout(f.ctx, 200*time.Millisecond)
	defer cancel()
	require.Error(t, s.LogWrite(ctx, b))
	require.NoError(t, tx.Rollback(f.ctx))
	require.NoError(t, s.LogWrite(f.ctx, b), "on a new connection")
}
