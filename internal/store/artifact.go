package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/internal/core"
)

const artifactColumns = `id, run_id, step_id, step_name, sequence, name, full_path, value, tags, metadata, created_at`

func artifactScanTargets(a *core.Artifact) []any {
	return []any{&a.ID, &a.RunID, &a.StepID, &a.StepName, &a.Sequence, &a.Name, &a.FullPath, &a.Value, &a.Tags,
		&a.Metadata, &a.CreatedAt}
}

// ArtifactCreateParams is an artifact a step stores.
type ArtifactCreateParams struct {
	RunID    string
	StepID   string
	StepName string
	Sequence int
	Name     string
	Value    json.RawMessage
	Tags     []string
	Metadata json.RawMessage
	// Attempt, when set, fences the write: it is refused (ErrConflict)
	// unless the step is running that attempt, so a superseded attempt
	// cannot store what the current one will.
	Attempt int
}

// artifactsCreateSQL stores a batch of artifacts in one statement, one
// round trip: it locks their steps against finishing (FOR SHARE, in id
// order, as a result's FOR UPDATE waits for it), inserts each artifact
// whose step is of the run, is the one named, has not finished and, when
// its attempt is not 0, is running that attempt — in the order given, so
// of two for one full path the first is stored — and reads back, for each,
// what is needed to explain a refusal. The insert's conditions and
// artifactRefusal must say the same.
//
// The batch is one JSON array (see artifactBatch), not an array per
// column: PostgreSQL sees the length of an array argument, so every batch
// size would have a plan of its own and each execution would be planned
// again (about as long as it runs); the same estimate for any batch lets
// the plan be kept. That estimate is 100 artifacts, for which a hash join
// over a small step table looks cheaper than 100 look-ups: the lateral
// subquery keeps the look-ups by primary key. Sequences and attempts are
// bigint so that a number no step has is a mismatch, not an error.
const artifactsCreateSQL = `
WITH p AS (
    SELECT r.*, e.a -> 'value' AS value, e.a -> 'metadata' AS metadata, e.n
    FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e (a, n),
        jsonb_to_record(e.a) AS r (id text, run_id text, step_id text, step_name text, sequence bigint, name text,
            full_path text, tags text[], created_at bigint, attempt bigint)
), st AS (
    SELECT p.id, s.name, s.sequence, s.status, s.attempt
    FROM (SELECT id, run_id, step_id FROM p ORDER BY step_id) p
    CROSS JOIN LATERAL (
        SELECT name, sequence, status, attempt FROM step WHERE step.id = p.step_id AND step.run_id = p.run_id
        FOR SHARE) s
), ins AS (
    INSERT INTO artifact (id, run_id, step_id, step_name, sequence, name, full_path, value, tags, metadata, created_at)
    SELECT p.id, p.run_id, p.step_id, p.step_name, p.sequence, p.name, p.full_path, p.value, p.tags, p.metadata,
        p.created_at
    FROM p JOIN st USING (id)
    WHERE st.name = p.step_name AND st.sequence = p.sequence AND st.status IN ('pending', 'running')
        AND (p.attempt = 0 OR (st.status = 'running' AND st.attempt = p.attempt))
    ORDER BY p.n
    ON CONFLICT (run_id, full_path) DO NOTHING
    RETURNING id, value, metadata
)
SELECT p.id, EXISTS (SELECT 1 FROM run WHERE run.id = p.run_id), st.name, st.sequence, st.status, st.attempt,
    ins.id IS NOT NULL, ins.value, ins.metadata
FROM p LEFT JOIN st USING (id) LEFT JOIN ins USING (id)`

// ArtifactCreate stores an artifact of a step of the run. The step must be
// of this run and match stepName and sequence (ErrInvalid), and must not
// have finished (ErrConflict); a second artifact at the same full path is
// ErrConflict, since artifacts are immutable.
func (s *Store) ArtifactCreate(ctx context.Context, p ArtifactCreateParams) (core.Artifact, error) {
	r := s.ArtifactsCreate(ctx, []ArtifactCreateParams{p})[0]
	return r.Artifact, r.Err
}

// ArtifactCreated is the outcome of one artifact of ArtifactsCreate.
type ArtifactCreated struct {
	Artifact core.Artifact
	Err      error
}

// ArtifactsCreate stores artifacts, each exactly as ArtifactCreate would
// and with its own outcome, in one statement: a server storing the
// artifacts of many steps at once pays for one statement and one commit
// rather than one each. When the statement fails as a whole (an artifact
// PostgreSQL refuses, say), each artifact is tried on its own, so that it
// fails only the artifact at fault.
func (s *Store) ArtifactsCreate(ctx context.Context, ps []ArtifactCreateParams) []ArtifactCreated {
	out := make([]ArtifactCreated, len(ps))
	var b artifactBatch
	var batched []int                   // indexes in ps of the artifacts in b
	at := make(map[string]int, len(ps)) // artifact id → index in ps
	now := s.nowMillis()
	for i, p := range ps {
		if !validID(p.RunID) {
			out[i].Err = fmt.Errorf("store artifact: run %q: %w", p.RunID, core.ErrNotFound)
			continue
		}
		if p.Tags == nil {
			p.Tags = []string{}
		}
		a := core.Artifact{ID: newID(), RunID: p.RunID, StepID: p.StepID, StepName: p.StepName, Sequence: p.Sequence,
			Name: p.Name, FullPath: core.FullPath(p.StepName, p.Sequence, p.Name), Tags: p.Tags, CreatedAt: now}
		if err := b.add(a, p); err != nil {
			out[i].Err = fmt.Errorf("store artifact: %w", err)
			continue
		}
		out[i].Artifact = a
		at[a.ID] = i
		batched = append(batched, i)
	}
	if len(batched) == 0 {
		return out
	}
	err := s.artifactsInsert(ctx, &b, func(id string, runFound, inserted bool, st artifactStep, value, metadata json.RawMessage) {
		i := at[id]
		if !inserted {
			out[i] = ArtifactCreated{Err: fmt.Errorf("store artifact: %w", artifactRefusal(ps[i], out[i].Artifact.FullPath, runFound, st))}
			return
		}
		out[i].Artifact.Value, out[i].Artifact.Metadata = value, metadata
	})
	switch {
	case err == nil:
	case len(batched) == 1:
		out[batched[0]] = ArtifactCreated{Err: fmt.Errorf("store artifact: %w", err)}
	default:
		for _, i := range batched {
			out[i] = s.ArtifactsCreate(ctx, ps[i:i+1])[0]
		}
	}
	return out
}

// artifactBatch is artifactsCreateSQL's argument: a JSON array with an
// object for each artifact. Value and metadata go in as they are, so that
// PostgreSQL parses them once and keeps them exactly as it would have kept
// them alone: absent metadata is SQL NULL, JSON null is JSON null.
type artifactBatch struct {
	doc []byte
	n   int
}

// artifactRow is an artifact's object in an artifactBatch, but for its
// value and metadata.
type artifactRow struct {
	ID        string   `json:"id"`
	RunID     string   `json:"run_id"`
	StepID    string   `json:"step_id"`
	StepName  string   `json:"step_name"`
	Sequence  int      `json:"sequence"`
	Name      string   `json:"name"`
	FullPath  string   `json:"full_path"`
	Tags      []string `json:"tags"`
	CreatedAt int64    `json:"created_at"`
	Attempt   int      `json:"attempt"`
}

// add appends an artifact. A value or metadata that is not one JSON value
// is ErrInvalid, as PostgreSQL would have it; checking it here also keeps
// it from adding keys to the object.
func (b *artifactBatch) add(a core.Artifact, p ArtifactCreateParams) error {
	if !json.Valid(p.Value) {
		return fmt.Errorf("%w: the value is not JSON", core.ErrInvalid)
	}
	if len(p.Metadata) > 0 && !json.Valid(p.Metadata) {
		return fmt.Errorf("%w: the metadata is not JSON", core.ErrInvalid)
	}
	obj, err := json.Marshal(artifactRow{ID: a.ID, RunID: a.RunID, StepID: a.StepID, StepName: a.StepName,
		Sequence: a.Sequence, Name: a.Name, FullPath: a.FullPath, Tags: a.Tags, CreatedAt: a.CreatedAt,
		Attempt: p.Attempt})
	if err != nil {
		return err
	}
	if b.n == 0 {
		b.doc = append(b.doc, '[')
	} else {
		b.doc = append(b.doc, ',')
	}
	b.n++
	b.doc = append(b.doc, obj[:len(obj)-1]...)
	b.doc = append(b.doc, `,"value":`...)
	b.doc = append(b.doc, p.Value...)
	if len(p.Metadata) > 0 {
		b.doc = append(b.doc, `,"metadata":`...)
		b.doc = append(b.doc, p.Metadata...)
	}
	b.doc = append(b.doc, '}')
	return nil
}

// artifactsInsert runs artifactsCreateSQL and calls row for each artifact.
// The statement's locks can deadlock with a transaction's as inTx's can; it
// is retried the same way.
func (s *Store) artifactsInsert(ctx context.Context, b *artifactBatch,
	row func(id string, runFound, inserted bool, st artifactStep, value, metadata json.RawMessage)) error {
	for attempt := 0; ; attempt++ {
		rows, err := s.pool.Query(ctx, artifactsCreateSQL, string(append(b.doc, ']')))
		if err == nil {
			// Rows are read only once the statement is known to have
			// succeeded: a failure found on the way is retried as a whole.
			type result struct {
				id                 string
				runFound, inserted bool
				st                 artifactStep
				value, metadata    json.RawMessage
			}
			var results []result
			var r result
			_, err = pgx.ForEachRow(rows, []any{&r.id, &r.runFound, &r.st.name, &r.st.sequence, &r.st.status,
				&r.st.attempt, &r.inserted, &r.value, &r.metadata}, func() error {
				results = append(results, r)
				r = result{}
				return nil
			})
			if err == nil {
				for _, r := range results {
					row(r.id, r.runFound, r.inserted, r.st, r.value, r.metadata)
				}
				return nil
			}
		}
		if attempt >= 5 || !retryable(err) {
			return interpretError(err)
		}
	}
}

// artifactStep is what artifactCreateSQL reads of the step; name is nil
// when the run has no step of that id.
type artifactStep struct {
	name     *string
	sequence *int
	status   *core.StepStatus
	attempt  *int
}

// artifactRefusal explains why artifactCreateSQL stored nothing, checking
// in the order a caller should hear it: an unknown run (ErrNotFound), a
// step that is not the run's or not the one named (ErrInvalid), a finished
// step or a superseded attempt (ErrConflict), and else an artifact already
// at that full path (ErrConflict).
func artifactRefusal(p ArtifactCreateParams, fullPath string, runFound bool, st artifactStep) error {
	switch {
	case !runFound:
		return fmt.Errorf("run %s: %w", p.RunID, core.ErrNotFound)
	case st.name == nil:
		return core.Invalid("stepId", "no step "+p.StepID+" in this run")
	case *st.name != p.StepName:
		return core.Invalid("stepName", fmt.Sprintf("step %s is named %q, not %q", p.StepID, *st.name, p.StepName))
	case *st.sequence != p.Sequence:
		return core.Invalid("sequence", fmt.Sprintf("step %s has sequence %d, not %d", p.StepID, *st.sequence, p.Sequence))
	case st.status.Terminal():
		return fmt.Errorf("%w: step %s is %s and can store no more artifacts", core.ErrConflict, p.StepID, *st.status)
	case p.Attempt != 0 && (*st.status != core.StepRunning || *st.attempt != p.Attempt):
		return fmt.Errorf("%w: attempt %d of step %s is no longer current", core.ErrConflict, p.Attempt, p.StepID)
	}
	return fmt.Errorf("%w: artifact %s already exists; artifacts are immutable", core.ErrConflict, fullPath)
}

// ArtifactListParams filters and pages a run's artifacts.
type ArtifactListParams struct {
	RunID      string
	StepName   string
	Sequence   *int
	Name       string
	NamePrefix string
	Tags       []string // any of them
	Page
}

var artifactSortColumns = map[string]string{
	"":          "created_at",
	"createdAt": "created_at",
	"name":      "name",
	"stepName":  "step_name",
	"sequence":  "sequence",
	"fullPath":  "full_path",
}

// ArtifactSortFields are the sortBy values the artifact list accepts.
func ArtifactSortFields() []string { return sortFields(artifactSortColumns) }

// ArtifactList returns a page of a run's artifacts and how many match in all.
func (s *Store) ArtifactList(ctx context.Context, p ArtifactListParams) ([]core.Artifact, int, error) {
	if err := s.runExists(ctx, p.RunID); err != nil {
		return nil, 0, err
	}
	seq := 0
	if p.Sequence != nil {
		seq = *p.Sequence
	}
	where, args := filters{}.
		add("run_id = $%d", p.RunID, true).
		add("step_name = $%d", p.StepName, p.StepName != "").
		add("sequence = $%d", seq, p.Sequence != nil).
		add("name = $%d", p.Name, p.Name != "").
		add("starts_with(name, $%d)", p.NamePrefix, p.NamePrefix != "").
		add("tags && $%d", p.Tags, len(p.Tags) > 0).
		build()
	return listPage(ctx, s, listQuery{what: "list artifacts", columns: artifactColumns, from: " FROM artifact" + where,
		orderBy: p.orderBy(artifactSortColumns), args: args}, p.Page,
		func(row pgx.CollectableRow, total *int) (core.Artifact, error) {
			var a core.Artifact
			err := row.Scan(append(artifactScanTargets(&a), total)...)
			return a, err
		})
}

// ArtifactGet returns one artifact of a run.
func (s *Store) ArtifactGet(ctx context.Context, runID, id string) (core.Artifact, error) {
	if !validID(runID) || !validID(id) {
		return core.Artifact{}, fmt.Errorf("artifact %q: %w", id, core.ErrNotFound)
	}
	var a core.Artifact
	err := s.pool.QueryRow(ctx, `SELECT `+artifactColumns+` FROM artifact WHERE id = $1 AND run_id = $2`, id, runID).
		Scan(artifactScanTargets(&a)...)
	if err != nil {
		return core.Artifact{}, fmt.Errorf("artifact %s: %w", id, interpretError(err))
	}
	return a, nil
}
