package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/maxq-dev/maxq/internal/script"
	"github.com/maxq-dev/maxq/internal/store"
)

// logBatcher writes the output of all of a worker's scripts to the log
// table from one goroutine, a COPY per batch: every flushEvery, or sooner
// when a batch is full. Lines are copied into the batch as they come, so
// none is kept as a string of its own, and there are two batches, one
// filling while the other is written, each bounded in lines and in bytes:
// a script that prints faster than the database takes it is slowed, never
// buffered without end, and the batcher's memory does not depend on how
// much or how long the lines are.
type logBatcher struct {
	store  *store.Store
	logger *slog.Logger

	mu      sync.Mutex
	changed sync.Cond // a batch was taken for writing, or written
	filling *store.LogBatch
	spare   *store.LogBatch // nil while it is being written
	gen     uint64          // counts the batches filled, for logSource
	queued  uint64          // lines added so far
	written uint64          // lines written (or given up on) so far
	syncs   int             // calls of sync waiting
	closed  bool

	kick chan struct{} // a batch is full, a sync waits, or close
	done chan struct{}
}

// logSource is one output stream of one script attempt, and its index in
// the batch being filled (when gen is the batch's).
type logSource struct {
	store.LogSource
	gen   uint64
	index int
}

const (
	batchSize  = 1000     // lines
	batchBytes = 64 << 10 // bytes of messages
	flushEvery = 100 * time.Millisecond
)

func newLogBatcher(s *store.Store, logger *slog.Logger) *logBatcher {
	b := &logBatcher{store: s, logger: logger, gen: 1, kick: make(chan struct{}, 1), done: make(chan struct{}),
		filling: store.NewLogBatch(batchSize, batchBytes), spare: store.NewLogBatch(batchSize, batchBytes)}
	b.changed.L = &b.mu
	go b.loop()
	return b
}

// sink returns the Output function for one script attempt. Prefer
// sinkBytes, as Spec.OutputBytes: for Output, script makes a string of
// every line up to the cap (10 MiB by default), garbage that lifts the
// heap to the collector's 4 MB floor, where the batcher itself allocates
// a few dozen objects per batch of hundreds of lines.
func (b *logBatcher) sink(runID, stepID, callID string, attempt int) func(script.Line) {
	out := b.sinkBytes(runID, stepID, callID, attempt)
	return func(l script.Line) {
		// The bytes of the string, which out only reads.
		out(l.Stream, unsafe.Slice(unsafe.StringData(l.Text), len(l.Text)), l.At)
	}
}

// sinkBytes returns the OutputBytes function for one script attempt.
func (b *logBatcher) sinkBytes(runID, stepID, callID string, attempt int) func(script.Stream, []byte, time.Time) {
	source := func(stream script.Stream, level string) *logSource {
		data := json.RawMessage(`{"stream":"` + string(stream) + `","attempt":` + strconv.Itoa(attempt) + `}`)
		return &logSource{LogSource: store.LogSource{RunID: runID, StepID: stepID, FlowCallID: callID, Attempt: attempt,
			Level: level, Data: data}}
	}
	stdout, stderr := source(script.Stdout, "info"), source(script.Stderr, "error")
	return func(stream script.Stream, text []byte, at time.Time) {
		src := stdout
		if stream == script.Stderr {
			src = stderr
		}
		b.add(src, cleanText(text), at.UnixMilli())
	}
}

// cleanText makes a line storable as PostgreSQL text: valid UTF-8, no NUL.
// It allocates only for a line that needs it.
func cleanText(text []byte) []byte {
	if utf8.Valid(text) && bytes.IndexByte(text, 0) < 0 {
		return text
	}
	s := strings.ToValidUTF8(string(text), "\uFFFD")
	return []byte(strings.ReplaceAll(s, "\x00", "\uFFFD"))
}

// add copies a line into the batch being filled, waiting while that batch
// is full and the other one is still being written.
func (b *logBatcher) add(src *logSource, text []byte, at int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for full(b.filling, len(text)) {
		b.poke()
		b.changed.Wait()
	}
	if src.gen != b.gen {
		src.gen, src.index = b.gen, b.filling.AddSource(src.LogSource)
	}
	b.filling.Add(src.index, text, at)
	b.queued++
	if full(b.filling, 0) {
		b.poke()
	}
}

// full reports whether batch has no room for a line of n bytes. An empty
// batch takes any line, so one longer than batchBytes still goes.
func full(batch *store.LogBatch, n int) bool {
	return batch.Len() > 0 && (batch.Len() >= batchSize || batch.Size()+n > batchBytes)
}

// poke wakes the loop, unless it is awake already.
func (b *logBatcher) poke() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *logBatcher) loop() {
	defer close(b.done)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	for {
		select {
		case <-b.kick:
		case <-tick.C:
		}
		b.mu.Lock()
		batch := b.filling
		if batch.Len() == 0 {
			closed := b.closed
			b.mu.Unlock()
			if closed {
				return
			}
			continue
		}
		b.filling, b.spare = b.spare, nil
		b.gen++
		b.changed.Broadcast()
		b.mu.Unlock()

		b.write(batch)
		n := uint64(batch.Len())
		batch.Reset()
		if batch.Capacity() > 4*batchBytes {
			batch = store.NewLogBatch(batchSize, batchBytes) // after a line far longer than most
		}
		b.mu.Lock()
		b.spare = batch
		b.written += n
		more := b.closed || full(b.filling, 0) || b.syncs > 0 && b.written < b.queued
		b.changed.Broadcast()
		b.mu.Unlock()
		if more {
			b.poke()
		}
	}
}

// write writes one batch. A database restart must not lose output: it
// retries for a while (scripts printing meanwhile fill the other batch,
// then wait).
func (b *logBatcher) write(batch *store.LogBatch) {
	delay := 100 * time.Millisecond
	for start := time.Now(); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.store.LogWrite(ctx, batch)
		cancel()
		if err == nil {
			return
		}
		if time.Since(start) > time.Minute {
			b.logger.Error("write script output to the log table: giving up", "lines", batch.Len(), "err", err)
			return
		}
		b.logger.Warn("write script output to the log table: retrying", "lines", batch.Len(), "err", err)
		time.Sleep(delay)
		delay = min(2*delay, 5*time.Second)
	}
}

// sync returns once every line queued so far is written, so a script's
// output is in the log table before its result is recorded.
func (b *logBatcher) sync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	target := b.queued
	if b.written >= target {
		return
	}
	b.syncs++
	defer func() { b.syncs-- }()
	b.poke()
	for b.written < target {
		b.changed.Wait()
	}
}

// close flushes what is queued and stops; no sink may be used after it.
func (b *logBatcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.poke()
	<-b.done
}
