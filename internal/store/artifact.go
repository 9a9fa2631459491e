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
	var a core.Artifact
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run WHERE id = $1)`, p.RunID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("run %s: %w", p.RunID, core.ErrNotFound)
		}
		if !validID(p.StepID) {
			return core.Invalid("stepId", "no step "+p.StepID+" in this run")
		}
		var name string
		var seq, attempt int
		var status core.StepStatus
		err := tx.QueryRow(ctx, `SELECT name, sequence, status, attempt FROM step WHERE id = $1 AND run_id = $2 FOR SHARE`,
			p.StepID, p.RunID).Scan(&name, &seq, &status, &attempt)
		if err != nil {
			if isNotFound(err) {
				return core.Invalid("stepId", "no step "+p.StepID+" in this run")
			}
			return err
		}
		if name != p.StepName {
			return core.Invalid("stepName", fmt.Sprintf("step %s is named %q, not %q", p.StepID, name, p.StepName))
		}
		if seq != p.Sequence {
			return core.Invalid("sequence", fmt.Sprintf("step %s has sequence %d, not %d", p.StepID, seq, p.Sequence))
		}
		if status.Terminal() {
			return fmt.Errorf("%w: step %s is %s and can store no more artifacts", core.ErrConflict, p.StepID, status)
		}
		if p.Attempt != 0 && (status != core.StepRunning || attempt != p.Attempt) {
			return fmt.Errorf("%w: attempt %d of step %s is no longer current", core.ErrConflict, p.Attempt, p.StepID)
		}
		fullPath := core.FullPath(p.StepName, p.Sequence, p.Name)
		err = tx.QueryRow(ctx, `INSERT INTO artifact (id, run_id, step_id, step_name, sequence, name, full_path, value, tags, metadata, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (run_id, full_path) DO NOTHING
			RETURNING `+artifactColumns,
			newID(), p.RunID, p.StepID, p.StepName, p.Sequence, p.Name, fullPath, string(p.Value), p.Tags,
			nullJSON(p.Metadata), s.nowMillis()).Scan(artifactScanTargets(&a)...)
		if isNotFound(err) {
			return fmt.Errorf("%w: artifact %s already exists; artifacts are immutable", core.ErrConflict, fullPath)
		}
		return err
	})
	if err != nil {
		return core.Artifact{}, fmt.Errorf("store artifact: %w", err)
	}
	return a, nil
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
