// Package store is the only package that speaks SQL. It holds MaxQ's state in
// PostgreSQL and every transition of it, each one transaction.
//
// # State machines
//
//	run:       pending → running → completed | failed | cancelled
//	stage:     running → completed | failed | cancelled
//	step:      pending → running → completed | failed | cancelled
//	           running → pending (an attempt failed and retries remain)
//	flow call: pending → running → completed | failed | cancelled
//
// A transition does, in the same transaction, everything that follows from
// it. Completing a step decrements deps_left of the pending steps that
// depend on its name (a step is ready when it reaches zero) and steps_left
// of its stage; the transition that brings steps_left to zero completes the
// stage and either completes the run (a final stage) or queues the next call
// of flow.sh. A step that fails for good fails its dependents, transitively
// and in any stage, with reason dependency_failed; fails its stage and
// cancels the stage's other pending steps; the stage's failure call of
// flow.sh is queued once none of its steps is still running.
//
// Workers record their steps' results in batches (StepsFinish): one
// transaction per batch, in which one statement completes the batch's steps,
// releases their dependents and counts them off their stages. Rows that
// several transactions may write at once — dependents and stages — are
// locked in id order, then runs, so concurrent transitions do not deadlock.
//
// # Readiness and claims
//
// Workers claim with one statement per kind that locks ready rows with FOR
// UPDATE SKIP LOCKED, both pipelined in one round trip (Claim). A step is ready when pending, deps_left = 0 and ready_at has
// passed (ready_at carries retry backoff); a partial index holds exactly
// those rows, so claims never scan blocked or finished steps. Flow calls of
// one run are serialized through the run row: run.flow_ready is true when a
// call is pending and none is running, the claim clears it, and finishing a
// call sets it again if another is queued. A unique index makes two running
// calls of one run impossible.
//
// A worker recording a batch of results also claims, in the same
// transaction, the dependents the batch made ready, up to its free slots
// (StepsClaim). Any transaction that makes work ready and leaves some of it
// unclaimed sends one NOTIFY on NotifyChannel.
package store
