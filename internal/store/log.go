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
	Level      string // info (stdout) or error (stderr)
	Message    string
	Data       json.RawMessage
	CreatedAt  int64
}

// LogAppend writes lines with one COPY.
func (s *Store) LogAppend(ctx context.Context, lines []LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"log"},
		[]string{"id", "run_id", "step_id", "flow_call_id", "level", "message", "data", "created_at"},
		pgx.CopyFromSlice(len(lines), func(i int) ([]any, error) {
			l := lines[i]
			return []any{newID(), l.RunID, nullString(l.StepID), nullString(l.FlowCallID), l.Level, l.Message,
				nullJSON(l.Data), l.CreatedAt}, nil
		}))
	if err != nil {
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
