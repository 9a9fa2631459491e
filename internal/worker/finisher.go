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
// added wait. The same transaction claims the dependents the batch makes
// ready and the next flow.sh calls of runs whose stage ended, for the
// worker's free slots, and the finisher starts them: a dependent starts the
// moment its dependency's result is committed.
type finisher struct {
	w         *Worker
	startStep func(store.ClaimedStep)     // runs a claimed step
	startCall func(store.ClaimedFlowCall) // runs a claimed call of flow.sh
	mu        sync.Mutex
	queue     []outcome
	kick      chan struct{}
	// pending counts outcomes queued or being written.
	pending atomic.Int64
}

// outcome is one step attempt's result waiting to be recorded.
type outcome struct {
	p   store.StepFinishParams
	log *slog.Logger
}

func newFinisher(w *Worker, startStep func(store.ClaimedStep), startCall func(store.ClaimedFlowCall)) *finisher {
	return &finisher{w: w, startStep: startStep, startCall: startCall, kick: make(chan struct{}, 1)}
}

// add queues an outcome, and with it its step's slot (see stepEnded). The
// worker's WaitGroup counts it until recorded, so a stopping worker waits
// for it, and so does pending, from before the step leaves the worker's
// running steps: the worker never looks idle in between.
func (f *finisher) add(o outcome) {
	w := f.w
	w.wg.Add(1)
	f.pending.Add(1)
	// The slot is held before the outcome is queued, so that no batch
	// gives back a slot it was not given.
	w.mu.Lock()
	delete(w.steps, o.p.StepID)
	w.reserved.steps++
	w.mu.Unlock()
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
// whole. Each outcome came with its step's slot (stepEnded): the batch
// claims into those first and gives back what it did not fill.
func (f *finisher) record(ctx context.Context, batch []outcome) {
	w := f.w
	held := len(batch)
	defer func() {
		w.unreserve(held, 0)
		f.pending.Add(-int64(len(batch)))
		w.wg.Add(-len(batch))
		// The claim loop fills the slots the batch did not, with the
		// dependents left unclaimed, without waiting for their NOTIFY to
		// come back. This wake also covers a claim of the loop that ran
		// while the batch held slots and so took fewer than there were:
		// work made ready meanwhile, which the batch's claim could not see,
		// is claimed now. (A serverless pass also looks again whether it
		// is done, now that nothing is pending.)
		w.poke()
	}()
	// Every line the scripts printed was queued before their outcomes.
	w.logs.sync()
	params := make([]store.StepFinishParams, len(batch))
	for i, o := range batch {
		params[i] = o.p
	}
	applied, err := f.finishAndClaim(ctx, params, held)
	switch {
	case err != nil && (len(batch) == 1 || !store.Rejected(err)):
		w.record(ctx, batch[0].log, "record step results", func(ctx context.Context) (err error) {
			applied, err = f.finishAndClaim(ctx, params, held)
			return err
		})
	case err != nil:
		w.logger.Warn("record step results: batch refused; recording one at a time", "steps", len(batch), "err", err)
		applied = make([]bool, len(batch))
		for i, o := range batch {
			w.record(ctx, o.log, "record step result", func(ctx context.Context) error {
				res, err := w.store.StepsFinish(ctx, params[i:i+1], store.StepsClaim{})
				if err == nil {
					applied[i] = res.Applied[0]
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
}

// finishAndClaim records outcomes and starts the dependents and the calls
// of flow.sh claimed with them: the dependents into the held slots of the
// batch's own steps, and beyond those into free slots, which it reserves
// only while the transaction claims.
func (f *finisher) finishAndClaim(ctx context.Context, params []store.StepFinishParams, held int) (applied []bool, err error) {
	w := f.w
	w.claiming.Lock() // not while the loop claims: see fill
	defer w.claiming.Unlock()
	claim := store.StepsClaim{}
	var steps, calls int // reserved
	if p, ok := w.stepClaimParams(0); ok {
		claim.StepClaimParams = p
		claim.Slots = func(n int) int {
			k, extra := w.reserveForBatch(held, n)
			steps += extra
			return k
		}
		if w.flowFits(p) {
			claim.FlowSlots = func(n int) int {
				_, k := w.reserve(0, n)
				calls += k
				return k
			}
		}
	}
	res, err := w.store.StepsFinish(ctx, params, claim)
	// What was claimed takes its slots before the reservation goes, so
	// fill never sees them free.
	for _, c := range res.Calls {
		f.startCall(c)
	}
	for _, c := range res.Claimed {
		f.startStep(c)
	}
	w.unreserve(steps, calls)
	if len(res.Claimed)+len(res.Calls) > 0 {
		w.count(func(r *Report) {
			r.StepsClaimed += len(res.Claimed)
			r.FlowCallsClaimed += len(res.Calls)
		})
	}
	return res.Applied, err
}
