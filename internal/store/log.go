package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// LogLine is one line a script printed.
type LogLine struct {
	RunID      string
	StepID     string // empty for flow.sh output
	FlowCallID string // empty for step output
	Attempt    int    // the attempt of the step or flow call that printed it
	Level      string // info (stdout) or error (stderr)
	Message    string
	Data       json.RawMessage
	CreatedAt  int64
}

// logAppendSQL inserts a batch of lines, keeping only those of the current
// attempt of their step or flow call: what a superseded attempt printed
// (its worker was paused past its lease, say) is dropped.
const logAppendSQL = `
INSERT INTO log (id, run_id, step_id, flow_call_id, level, message, data, created_at)
SELECT u.id, u.run_id, NULLIF(u.step_id, ''), NULLIF(u.flow_call_id, ''), u.level, u.message, u.data::jsonb, u.created_at
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::int[])
    AS u(id, run_id, step_id, flow_call_id, level, message, data, created_at, attempt)
WHERE EXISTS (SELECT 1 FROM step s WHERE s.id = NULLIF(u.step_id, '') AND s.attempt = u.attempt)
   OR EXISTS (SELECT 1 FROM flow_call f WHERE f.id = NULLIF(u.flow_call_id, '') AND f.attempt = u.attempt)`

// LogAppend writes lines in one statement.
func (s *Store) LogAppend(ctx context.Context, lines []LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	n := len(lines)
	ids, runs, steps, calls := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	levels, messages, data := make([]string, n), make([]string, n), make([]*string, n)
	at, attempts := make([]int64, n), make([]int32, n)
	for i, l := range lines {
		ids[i], runs[i], steps[i], calls[i] = newID(), l.RunID, l.StepID, l.FlowCallID
		levels[i], messages[i], at[i], attempts[i] = l.Level, l.Message, l.CreatedAt, int32(l.Attempt)
		if len(l.Data) > 0 {
			d := string(l.Data)
			data[i] = &d
		}
	}
	if _, err := s.pool.Exec(ctx, logAppendSQL, ids, runs, steps, calls, levels, messages, data, at, attempts); err != nil {
		return fmt.Errorf("append log lines: %w", interpretError(err))
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// LogEntry is a stored line of a run's output.
type LogEntry struct {
	Seq        int64           `json:"seq"`
	StepID     *string         `json:"stepId"`
	StepName   *string         `json:"stepName"`
	Sequence   *int            `json:"sequence"`
	FlowCallID *string         `json:"flowCallId"`
	Level      string          `json:"level"`
	Message    string          `json:"message"`
	Data       json.RawMessage `json:"data"`
	CreatedAt  int64           `json:"createdAt"`
}

// LogListParams selects a run's log lines after a cursor.
type LogListParams struct {
	RunID  string
	StepID string // optional
	After  int64  // the seq of the last line already seen
	Limit  int
}

// LogList returns up to Limit lines of a run (or of one of its steps) with
// seq > After, in the order they were written.
func (s *Store) LogList(ctx context.Context, p LogListParams) ([]LogEntry, error) {
	if err := s.runExists(ctx, p.RunID); err != nil {
		return nil, err
	}
	if p.StepID != "" && !validID(p.StepID) {
		return []LogEntry{}, nil
	}
	where, args := filters{}.
		add("l.run_id = $%d", p.RunID, true).
		add("l.step_id = $%d", p.StepID, p.StepID != "").
		add("l.seq > $%d", p.After, true).
		build()
	rows, err := s.pool.Query(ctx, `SELECT l.seq, l.step_id, s.name, s.sequence, l.flow_call_id, l.level, l.message, l.data, l.created_at
		FROM log l LEFT JOIN step s ON s.id = l.step_id`+where+fmt.Sprintf(" ORDER BY l.seq LIMIT $%d", len(args)+1),
		append(args, p.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("list log lines: %w", interpretError(err))
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LogEntry, error) {
		var e LogEntry
		err := row.Scan(&e.Seq, &e.StepID, &e.StepName, &e.Sequence, &e.FlowCallID, &e.Level, &e.Message, &e.Data, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list log lines: %w", interpretError(err))
	}
	if lines == nil {
		lines = []LogEntry{}
	}
	return lines, nil
}
