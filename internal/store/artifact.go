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

// artifactCreateSQL stores an artifact in one statement, one round trip:
// it locks the step against finishing (FOR SHARE, as a result's FOR UPDATE
// waits for it), inserts only if the step is of the run, has the name and
// sequence given, has not finished and, when $12 is not 0, is running that
// attempt, and reads back what ArtifactCreate needs to explain a refusal.
// The insert's conditions and artifactRefusal must say the same. Sequence
// and attempt are bigint so that a number no step has is a mismatch, not
// an encoding error.
const artifactCreateSQL = `
WITH st AS (
    SELECT name, sequence, status, attempt FROM step WHERE id = $3 AND run_id = $2 FOR SHARE
), ins AS (
    INSERT INTO artifact (id, run_id, step_id, step_name, sequence, name, full_path, value, tags, metadata, created_at)
    SELECT $1, $2, $3, $4, $5::bigint, $6, $7, $8, $9, $10, $11 FROM st
    WHERE st.name = $4 AND st.sequence = $5::bigint AND st.status IN ('pending', 'running')
        AND ($12::bigint = 0 OR (st.status = 'running' AND st.attempt = $12::bigint))
    ON CONFLICT (run_id, full_path) DO NOTHING
    RETURNING value, metadata
)
SELECT EXISTS (SELECT 1 FROM run WHERE id = $2), st.name, st.sequence, st.status, st.attempt,
    ins.value IS NOT NULL, ins.value, ins.metadata
FROM (VALUES (1)) AS one LEFT JOIN st ON true LEFT JOIN ins ON true`

// ArtifactCreate stores an artifact of a step of the run. The step must be
// of this run and match stepName and sequence (ErrInvalid), and must not
// have finished (ErrConflict); a second artifact at the same full path is
// ErrConflict, since artifacts are immutable.
func (s *Store) ArtifactCreate(ctx context.Context, p ArtifactCreateParams) (core.Artifact, error) {
	if !validID(p.RunID) {
		return core.Artifact{}, fmt.Errorf("run %q: %w", p.RunID, core.ErrNotFound)
	}
	if p.Tags == nil {
		p.Tags = []string{}
	}
	a := core.Artifact{ID: newID(), RunID: p.RunID, StepID: p.StepID, StepName: p.StepName, Sequence: p.Sequence,
		Name: p.Name, FullPath: core.FullPath(p.StepName, p.Sequence, p.Name), Tags: p.Tags, CreatedAt: s.nowMillis()}
	var found artifactStep
	var runFound, inserted bool
	var err error
	// Its locks can deadlock with a transaction's as inTx's can: retry the same.
	for attempt := 0; ; attempt++ {
		err = s.pool.QueryRow(ctx, artifactCreateSQL, a.ID, a.RunID, a.StepID, a.StepName, a.Sequence, a.Name,
			a.FullPath, string(p.Value), a.Tags, nullJSON(p.Metadata), a.CreatedAt, p.Attempt).
			Scan(&runFound, &found.name, &found.sequence, &found.status, &found.attempt, &inserted, &a.Value, &a.Metadata)
		if err == nil || attempt >= 5 || !retryable(err) {
			err = interpretError(err)
			break
		}
	}
	if err == nil && !inserted {
		err = artifactRefusal(p, a.FullPath, runFound, found)
	}
	if err != nil {
		return core.Artifact{}, fmt.Errorf("store artifact: %w", err)
	}
	return a, nil
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
