// Package worker claims ready work from PostgreSQL and runs it: steps
// (step.sh) up to MaxSteps at once and flow calls (flow.sh) up to MaxFlows.
//
// A worker is one loop. It wakes on a NOTIFY (a transaction made work
// ready), when slots come free (a flow call ended, or a batch of step
// results was recorded), at the earliest retry backoff, and on a slow poll
// as a safety net; each time it claims, with one statement per kind, as
// many ready items as it has free slots, and starts them. A flow call runs
// in a goroutine that waits for flow.sh and records its result in one
// transaction (store.FlowCallFinish); there are few at a time.
//
// A running step costs no goroutine, for a worker may run hundreds at once.
// Starting one (startStep) takes its slot and queues it for the launcher,
// a few goroutines that exist only while steps wait to be started: they
// give each its scratch directory and environment and start step.sh with
// script.Start, which returns at once. The script package watches every
// running script from one goroutine and, once a script has ended, calls
// back (stepEnded) in a goroutine of that step's own: the callback queues
// the result and passes the step's slot on with it, and one goroutine
// records the queued results in batches, one transaction per batch
// (store.StepsFinish), which also claims the dependents and the flow calls
// the batch made ready, into the slots of the batch's own steps and then
// the worker's free ones, so they start with no wake-up or claim of their
// own. Every claim, the loop's or the batch's, reserves the slots it may
// fill while it runs, so two claims never fill one slot, and a loop claim
// cannot take the slot a dependent is about to be claimed into. A running step is
// an entry in the worker's map, with the function that stops it, and about
// a kilobyte of heap. Results carry the attempt number as a fencing token,
// so a result that comes after the work was cancelled or handed to another
// worker changes nothing.
//
// A heartbeat renews the worker's row every HeartbeatInterval and, in the
// same statement, learns which of its scripts are no longer its own
// (cancelled, or taken over by another attempt) so it stops them; a script
// that ended its own step through the API is left to run to its end.
//
// Output is read line by line and written to the log table in batches by
// one goroutine (COPY), with a per-script byte cap.
package worker
