// Package worker claims ready work from PostgreSQL and runs it: steps
// (step.sh) up to MaxSteps at once and flow calls (flow.sh) up to MaxFlows.
//
// A worker is one loop. It wakes on a NOTIFY (a transaction made work
// ready), when slots come free (a flow call ended, or a batch of step
// results was recorded), at the earliest retry backoff, and on a slow poll
// as a safety net; each time it claims, with one
// statement per kind, as many ready items as it has free slots, and runs
// each in a goroutine. A flow call's goroutine records its result in one
// transaction (store.FlowCallFinish); a step's queues its result and frees
// its slot, and one goroutine records the queued results in batches, one
// transaction per batch (store.StepsFinish), which also claims the
// dependents the batch made ready and the next flow.sh calls of runs whose
// stage ended, for the worker's free slots, so they start with no wake-up
// or claim of their own. Every claim, the loop's or the batch's, reserves
// the slots it may fill while it runs, so two claims never fill one slot. Results carry the attempt number as
// a fencing token, so a result that comes after the work was cancelled or
// handed to another worker changes nothing.
//
// A heartbeat renews the worker's row every HeartbeatInterval and, in the
// same statement, learns which of its scripts are no longer its own
// (cancelled, their run ended) so it stops them.
//
// Output is read line by line and written to the log table in batches by
// one goroutine (COPY), with a per-script byte cap.
package worker
