package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/script"
	"github.com/maxq-dev/maxq/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// batcherFixture is a log batcher on a database of its own, and a running
// step to print for.
type batcherFixture struct {
	st   *store.Store
	b    *logBatcher
	step store.ClaimedStep
}

func newBatcherFixture(t testing.TB) *batcherFixture {
	ctx := context.Background()
	st := store.New(pgtest.Pool(t))
	worker, err := st.WorkerRegister(ctx, "test")
	require.NoError(t, err)
	run, _, err := st.RunCreate(ctx, store.RunCreateParams{FlowName: "flow"})
	require.NoError(t, err)
	_, _, _, err = st.StageSchedule(ctx, store.StageScheduleParams{RunID: run.ID, Stage: "only",
		Steps: []store.StepSpec{{Name: "a", Instances: 1}}})
	require.NoError(t, err)
	claimed, err := st.StepClaim(ctx, store.StepClaimParams{WorkerID: worker, Limit: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	return &batcherFixture{st: st, b: newLogBatcher(st, slog.New(slog.DiscardHandler)), step: claimed[0]}
}

// written is what the log table holds of the step, in order: stream,
// level and message of each line, and how many lines and message bytes
// each transaction wrote.
type written struct {
	lines                   []string
	perWrite, bytesPerWrite []int
}

func (f *batcherFixture) written(t *testing.T) written {
	var w written
	rows, err := f.st.Pool().Query(context.Background(), `SELECT data, level, message FROM log WHERE step_id = $1 ORDER BY xact_id, seq`, f.step.ID)
	require.NoError(t, err)
	for rows.Next() {
		var data json.RawMessage
		var level, message string
		require.NoError(t, rows.Scan(&data, &level, &message))
		var d struct {
			Stream  string `json:"stream"`
			Attempt int    `json:"attempt"`
		}
		require.NoError(t, json.Unmarshal(data, &d))
		require.Equal(t, f.step.Attempt, d.Attempt)
		w.lines = append(w.lines, d.Stream+" "+level+" "+message)
	}
	require.NoError(t, rows.Err())
	rows, err = f.st.Pool().Query(context.Background(), `SELECT count(*), sum(octet_length(message)) FROM log WHERE step_id = $1
		GROUP BY xact_id ORDER BY xact_id`, f.step.ID)
	require.NoError(t, err)
	for rows.Next() {
		var n, size int
		require.NoError(t, rows.Scan(&n, &size))
		w.perWrite = append(w.perWrite, n)
		w.bytesPerWrite = append(w.bytesPerWrite, size)
	}
	require.NoError(t, rows.Err())
	return w
}

// Lines reach the table in the order they were printed, each stream with
// its level, cleaned into valid text; sync returns once they are there.
func TestLogBatcherWritesInOrder(t *testing.T) {
	t.Parallel()
	f := newBatcherFixture(t)
	defer f.b.close()
	out := f.b.sink(f.step.RunID, f.step.ID, "", f.step.Attempt)
	outBytes := f.b.sinkBytes(f.step.RunID, f.step.ID, "", f.step.Attempt)
	var want []string
	for i := range 2500 {
		text := "line " + strconv.Itoa(i)
		switch i % 3 {
		case 0:
			out(script.Line{Stream: script.Stdout, Text: text, At: time.Now()})
			want = append(want, "stdout info "+text)
		case 1:
			outBytes(script.Stderr, []byte(text), time.Now())
			want = append(want, "stderr error "+text)
		default:
			outBytes(script.Stdout, []byte(text+"\x00\xff"), time.Now())
			want = append(want, "stdout info "+text+"\uFFFD\uFFFD")
		}
	}
	f.b.sync()
	require.Equal(t, want, f.written(t).lines)
}

// A write holds at most batchSize lines and batchBytes of messages (or one
// longer line), however the lines come.
func TestLogBatcherBoundsWrites(t *testing.T) {
	t.Parallel()
	f := newBatcherFixture(t)
	out := f.b.sinkBytes(f.step.RunID, f.step.ID, "", f.step.Attempt)
	short := []byte(strings.Repeat("s", 99))
	long := []byte(strings.Repeat("l", 60<<10))
	huge := []byte(strings.Repeat("h", 2*batchBytes))
	lines := 0
	for i := range 3000 {
		out(script.Stdout, short, time.Now())
		lines++
		if i%500 == 0 {
			out(script.Stdout, long, time.Now())
			out(script.Stdout, huge, time.Now())
			lines += 2
		}
	}
	f.b.close() // writes what is left
	w := f.written(t)
	require.Len(t, w.lines, lines)
	for i, n := range w.perWrite {
		require.LessOrEqual(t, n, batchSize)
		if w.bytesPerWrite[i] > batchBytes {
			require.Equal(t, 1, n, "only a line longer than batchBytes goes over it, alone")
		}
	}
	require.Greater(t, len(w.perWrite), lines/batchSize, "the lines took several writes")
}

// Passing a line on to the batcher allocates nothing, its share of the
// writes included, so a worker's memory does not grow with what its
// scripts print. (Not parallel: AllocsPerRun counts the whole process's
// allocations.)
func TestLogBatcherAllocatesNothingPerLine(t *testing.T) {
	f := newBatcherFixture(t)
	defer f.b.close()
	out := f.b.sinkBytes(f.step.RunID, f.step.ID, "", f.step.Attempt)
	outLine := f.b.sink(f.step.RunID, f.step.ID, "", f.step.Attempt)
	text := strings.Repeat("x", 99)
	msg := []byte(text)
	at := time.Now()
	out(script.Stdout, msg, at) // the first write sets up its connection
	f.b.sync()

	const lines = 20_000
	allocs := testing.AllocsPerRun(lines, func() { out(script.Stdout, msg, at) })
	require.Zero(t, allocs, "allocations per line through OutputBytes")
	allocs = testing.AllocsPerRun(lines, func() { outLine(script.Line{Stream: script.Stderr, Text: text, At: at}) })
	require.Zero(t, allocs, "allocations per line through Output")
	f.b.sync()
	require.Len(t, f.written(t).lines, 1+2*(lines+1)) // AllocsPerRun runs once more to warm up
}

// BenchmarkLogBatcher passes 100-byte lines through the batcher to the log
// table: its throughput, and what it allocates (the writes' share).
func BenchmarkLogBatcher(b *testing.B) {
	f := newBatcherFixture(b)
	defer f.b.close()
	out := f.b.sinkBytes(f.step.RunID, f.step.ID, "", f.step.Attempt)
	msg := []byte(strings.Repeat("x", 99))
	at := time.Now()
	const lines = 10_000
	b.SetBytes(lines * (int64(len(msg)) + 1))
	b.ReportAllocs()
	for b.Loop() {
		for range lines {
			out(script.Stdout, msg, at)
		}
		f.b.sync()
	}
}
