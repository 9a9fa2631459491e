package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/maxq-dev/maxq/internal/store"
)

// finisher records step outcomes in batches. A step's completion queues
// its outcome and frees its slot at once; one goroutine takes every
// outcome queued while the previous batch was being written, waits until
// their output is in the log table, and records them all in one
// transaction (store.StepsFinish). Under load a batch holds about as many
// outcomes as finish during one commit; when idle it holds one, with no
// added wait.
type finisher struct {
	w     *Worker
	mu    sync.Mutex
	queue []outcome
	kick  chan struct{}
	// pending counts outcomes queued or being written.
	pending atomic.Int64
}

// outcome is one step attempt's result waiting to be recorded.
type outcome struct {
	p   store.StepFinishParams
	log *slog.Logger
}

func newFinisher(w *Worker) *finisher {
	return &finisher{w: w, kick: make(chan struct{}, 1)}
}

// add queues an outcome. The worker's WaitGroup counts it until recorded,
// so a stopping worker waits for it.
func (f *finisher) add(o outcome) {
	f.w.wg.Add(1)
	f.pending.Add(1)
	f.mu.Lock()
	f.queue = append(f.queue, o)
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// loop records batches until ctx is done. The worker stops it only after
// its WaitGroup is done, when nothing is queued.
func (f *finisher) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
		}
		f.mu.Lock()
		batch := f.queue
		f.queue = nil
		f.mu.Unlock()
		if len(batch) > 0 {
			f.record(context.WithoutCancel(ctx), batch)
		}
	}
}

// record writes one batch. A batch the database refuses is recorded one
// outcome at a time, so one bad outcome cannot hold back the others; one
// that fails for another reason (the database restarting) is retried
// whole.
func (f *finisher) record(ctx context.Context, batch []outcome) {
	w := f.w
	defer func() {
		f.pending.Add(-int64(len(batch)))
		w.wg.Add(-len(batch))
	}()
	// Every line the scripts printed was queued before their outcomes.
	w.logs.sync()
	params := make([]store.StepFinishParams, len(batch))
	for i, o := range batch {
		params[i] = o.p
	}
	applied, woke, err := w.store.StepsFinish(ctx, params)
	switch {
	case err != nil && (len(batch) == 1 || !store.Rejected(err)):
		w.record(ctx, batch[0].log, "record step results", func(ctx context.Context) (err error) {
			applied, woke, err = w.store.StepsFinish(ctx, params)
			return err
		})
	case err != nil:
		w.logger.Warn("record step results: batch refused; recording one at a time", "steps", len(batch), "err", err)
		applied = make([]bool, len(batch))
		for i, o := range batch {
			w.record(ctx, o.log, "record step result", func(ctx context.Context) (err error) {
				one, oneWoke, err := w.store.StepsFinish(ctx, params[i:i+1])
				if err == nil {
					applied[i], woke = one[0], woke || oneWoke
				}
				return err
			})
		}
	}
	for i, o := range batch {
		if i < len(applied) && !applied[i] {
			o.log.Info("step result discarded: the step is no longer this attempt's", "completed", o.p.Completed)
		}
	}
	if woke || !w.deadline.IsZero() {
		// Dependents became ready: claim them without waiting for the
		// NOTIFY to come back. (A serverless pass also looks again
		// whether it is done.)
		w.poke()
	}
}
