package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/maxq-dev/maxq/internal/script"
	"github.com/maxq-dev/maxq/internal/store"
)

// logBatcher writes the output of all of a worker's scripts to the log
// table from one goroutine, a COPY per batch: every flushEvery, or sooner
// when batchSize lines wait. Its queue is bounded, so a script that prints
// faster than the database takes it is slowed, never buffered without end.
type logBatcher struct {
	store  *store.Store
	logger *slog.Logger
	lines  chan logItem
	done   chan struct{}
}

// logItem is a line to write, or a barrier: flushed is closed once every
// line queued before it is written.
type logItem struct {
	line    store.LogLine
	flushed chan struct{}
}

const (
	batchSize  = 1000
	flushEvery = 100 * time.Millisecond
)

func newLogBatcher(s *store.Store, logger *slog.Logger) *logBatcher {
	b := &logBatcher{store: s, logger: logger, lines: make(chan logItem, 4*batchSize), done: make(chan struct{})}
	go b.loop()
	return b
}

// sink returns the Output function for one script attempt.
func (b *logBatcher) sink(runID, stepID, callID string, attempt int) func(script.Line) {
	data := map[script.Stream]json.RawMessage{
		script.Stdout: json.RawMessage(`{"stream":"stdout","attempt":` + strconv.Itoa(attempt) + `}`),
		script.Stderr: json.RawMessage(`{"stream":"stderr","attempt":` + strconv.Itoa(attempt) + `}`),
	}
	return func(l script.Line) {
		level := "info"
		if l.Stream == script.Stderr {
			level = "error"
		}
		b.lines <- logItem{line: store.LogLine{RunID: runID, StepID: stepID, FlowCallID: callID, Attempt: attempt, Level: level,
			Message: cleanText(l.Text), Data: data[l.Stream], CreatedAt: l.At.UnixMilli()}}
	}
}

// cleanText makes a line storable as PostgreSQL text: valid UTF-8, no NUL.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

func (b *logBatcher) loop() {
	defer close(b.done)
	batch := make([]store.LogLine, 0, batchSize)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		// A database restart must not lose output: retry for a while
		// (scripts printing meanwhile wait on the bounded queue).
		delay := 100 * time.Millisecond
		for start := time.Now(); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := b.store.LogAppend(ctx, batch)
			cancel()
			if err == nil {
				break
			}
			if time.Since(start) > time.Minute {
				b.logger.Error("write script output to the log table: giving up", "lines", len(batch), "err", err)
				break
			}
			b.logger.Warn("write script output to the log table: retrying", "lines", len(batch), "err", err)
			time.Sleep(delay)
			delay = min(2*delay, 5*time.Second)
		}
		batch = batch[:0]
	}
	for {
		select {
		case it, ok := <-b.lines:
			switch {
			case !ok:
				flush()
				return
			case it.flushed != nil:
				flush()
				close(it.flushed)
			default:
				batch = append(batch, it.line)
				if len(batch) >= batchSize {
					flush()
				}
			}
		case <-tick.C:
			flush()
		}
	}
}

// sync returns once every line queued so far is written, so a script's
// output is in the log table before its result is recorded.
func (b *logBatcher) sync() {
	done := make(chan struct{})
	b.lines <- logItem{flushed: done}
	<-done
}

// close flushes what is queued and stops; no sink may be used after it.
func (b *logBatcher) close() {
	close(b.lines)
	<-b.done
}
