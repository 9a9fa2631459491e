package store

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// filters builds a WHERE clause from optional conditions.
type filters struct {
	conds []string
	args  []any
}

// add appends cond (with %d standing for its placeholder number) when on.
func (f filters) add(cond string, arg any, on bool) filters {
	if !on {
		return f
	}
	f.args = append(f.args, arg)
	f.conds = append(f.conds, fmt.Sprintf(cond, len(f.args)))
	return f
}

func (f filters) build() (string, []any) {
	if len(f.conds) == 0 {
		return "", f.args
	}
	return " WHERE " + strings.Join(f.conds, " AND "), f.args
}

// listQuery is a paged list: SELECT columns FROM-and-WHERE ORDER BY.
type listQuery struct {
	what    string // for errors: "list runs"
	columns string
	from    string // " FROM … WHERE …"
	orderBy string
	args    []any
}

// listPage runs q with the page's limit and offset and returns the rows and
// how many match in all (count(*) OVER () rides on the rows; past the end,
// a separate count keeps the total right).
func listPage[T any](ctx context.Context, s *Store, q listQuery, p Page,
	scan func(pgx.CollectableRow, *int) (T, error)) ([]T, int, error) {
	n := len(q.args)
	sql := "SELECT " + q.columns + ", count(*) OVER ()" + q.from + q.orderBy + fmt.Sprintf(" LIMIT $%d OFFSET $%d", n+1, n+2)
	rows, err := s.pool.Query(ctx, sql, append(q.args, p.Limit, p.Offset)...)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", q.what, interpretError(err))
	}
	total := 0
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row, &total) })
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", q.what, interpretError(err))
	}
	if len(items) == 0 && p.Offset > 0 {
		if err := s.pool.QueryRow(ctx, "SELECT count(*)"+q.from, q.args...).Scan(&total); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", q.what, interpretError(err))
		}
	}
	if items == nil {
		items = []T{}
	}
	return items, total, nil
}

func sortFields(columns map[string]string) []string {
	var out []string
	for k := range columns {
		if k != "" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
