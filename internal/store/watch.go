package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// runVersionSQL computes, for each run, a version string that changes
// whenever something a watcher sees changes: the run's status, a stage
// scheduled or ended, a step started, retried or ended.
const runVersionSQL = `
SELECT r.id, r.status
    || '/' || coalesce(g.n, 0) || '.' || coalesce(g.latest, 0) || '.' || coalesce(g.ended, 0)
    || '/' || coalesce(s.n, 0) || '.' || coalesce(s.latest, 0) || '.' || coalesce(s.running, 0)
    || '.' || coalesce(s.ended, 0) || '.' || coalesce(s.retries, 0)
FROM run r
LEFT JOIN LATERAL (
    SELECT count(*) AS n, max(greatest(created_at, completed_at)) AS latest, count(completed_at) AS ended
    FROM stage WHERE run_id = r.id) g ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n, max(greatest(created_at, started_at, completed_at)) AS latest,
        count(*) FILTER (WHERE status = 'running') AS running, count(completed_at) AS ended, sum(retry_count) AS retries
    FROM step WHERE run_id = r.id) s ON true
WHERE r.id = ANY($1)`

// RunVersions returns the current version of each run of ids that exists.
func (s *Store) RunVersions(ctx context.Context, ids []string) (map[string]string, error) {
	var valid []string
	for _, id := range ids {
		if validID(id) {
			valid = append(valid, id)
		}
	}
	out := make(map[string]string, len(valid))
	if len(valid) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, runVersionSQL, valid)
	if err != nil {
		return nil, fmt.Errorf("run versions: %w", interpretError(err))
	}
	var id, version string
	if _, err := pgx.ForEachRow(rows, []any{&id, &version}, func() error { out[id] = version; return nil }); err != nil {
		return nil, fmt.Errorf("run versions: %w", interpretError(err))
	}
	return out, nil
}
