package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/internal/core"
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
	// Cursor is this line's place in commit order; pass the last one seen
	// as LogListParams.After.
	Cursor string `json:"cursor"`
}

// LogListParams selects a run's log lines after a cursor.
type LogListParams struct {
	RunID  string
	StepID string // optional
	After  string // the Cursor of the last line already seen; "" from the start
	Limit  int
}

// ParseLogCursor checks a cursor a client sent.
func ParseLogCursor(c string) bool {
	_, _, ok := splitCursor(c)
	return ok
}

func splitCursor(c string) (xact, seq string, ok bool) {
	if c == "" {
		return "0", "0", true
	}
	xact, seq, found := strings.Cut(c, ".")
	if !found || !digits(xact) || !digits(seq) || len(xact) > 19 || len(seq) > 18 {
		return "", "", false
	}
	return xact, seq, true
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// LogList returns up to Limit lines of a run (or of one of its steps) that
// come after the cursor After, in commit order (and, within one write,
// the order they were printed). While the run is not finished, it returns
// only lines of transactions older than every transaction still running,
// so no line can later commit behind a cursor it handed out.
func (s *Store) LogList(ctx context.Context, p LogListParams) ([]LogEntry, error) {
	if err := s.runExists(ctx, p.RunID); err != nil {
		return nil, err
	}
	if p.StepID != "" && !validID(p.StepID) {
		return []LogEntry{}, nil
	}
	xact, seq, ok := splitCursor(p.After)
	if !ok {
		return nil, core.Invalid("after", "not a cursor from this API")
	}
	where, args := filters{}.
		add("l.run_id = $%d", p.RunID, true).
		add("l.step_id = $%d", p.StepID, p.StepID != "").
		add("(l.xact_id, l.seq) > ($%d::text::xid8, ", xact, true).
		build()
	args = append(args, seq)
	where += fmt.Sprintf("$%d::bigint)", len(args))
	where += ` AND (l.xact_id < pg_snapshot_xmin(pg_current_snapshot())
		OR (SELECT status FROM run WHERE id = l.run_id) IN ('completed', 'failed', 'cancelled'))`
	rows, err := s.pool.Query(ctx, `SELECT l.seq, l.step_id, s.name, s.sequence, l.flow_call_id, l.level, l.message, l.data,
		    l.created_at, l.xact_id::text || '.' || l.seq
		FROM log l LEFT JOIN step s ON s.id = l.step_id`+where+fmt.Sprintf(" ORDER BY l.xact_id, l.seq LIMIT $%d", len(args)+1),
		append(args, p.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("list log lines: %w", interpretError(err))
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LogEntry, error) {
		var e LogEntry
		err := row.Scan(&e.Seq, &e.StepID, &e.StepName, &e.Sequence, &e.FlowCallID, &e.Level, &e.Message, &e.Data,
			&e.CreatedAt, &e.Cursor)
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
