package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Report is the outcome of a Run: the machine it ran on and one row per
// figure.
type Report struct {
	Machine Machine
	Quick   bool
	Rows    []Row
}

// Row is one figure: its value, the floor it is measured against and
// whether it meets its target, if it has one.
type Row struct {
	Scenario string
	Figure   string
	Value    float64
	Unit     string // "steps/s", "ms", "MB", …
	// Floor is the baseline measured in the same run (NaN: none). Ratio is
	// Value/Floor, printed as a percentage for rates and as a multiple for
	// times.
	Floor float64
	// Text replaces Value when set (a breakdown, an error).
	Text   string
	Target *Target
}

// Target is a goal from the issue the benchmark was written for, and
// whether this run met it.
type Target struct {
	Goal string // e.g. "≥ 60% of floor and ≥ 500/s"
	Met  bool
}

// Ratio is Value/Floor, or NaN without a floor.
func (r Row) Ratio() float64 {
	if math.IsNaN(r.Floor) || r.Floor == 0 {
		return math.NaN()
	}
	return r.Value / r.Floor
}

// add appends a row.
func (r *Report) add(row Row) {
	r.Rows = append(r.Rows, row)
}

// value adds a row without floor.
func (r *Report) value(scenario, figure string, v float64, unit string) *Row {
	r.add(Row{Scenario: scenario, Figure: figure, Value: v, Unit: unit, Floor: math.NaN()})
	return &r.Rows[len(r.Rows)-1]
}

// versus adds a row measured against a floor.
func (r *Report) versus(scenario, figure string, v, floor float64, unit string) *Row {
	r.add(Row{Scenario: scenario, Figure: figure, Value: v, Unit: unit, Floor: floor})
	return &r.Rows[len(r.Rows)-1]
}

// text adds a row whose value is text.
func (r *Report) text(scenario, figure, text string) {
	r.add(Row{Scenario: scenario, Figure: figure, Text: text, Floor: math.NaN()})
}

// target sets the row's goal and whether it was met.
func (row *Row) target(goal string, met bool) {
	row.Target = &Target{Goal: goal, Met: met}
}

// Print writes the machine line and the table, in Markdown.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintln(w, r.Machine.Line())
	if r.Quick {
		fmt.Fprintln(w, "quick mode: tiny sizes, figures are not comparable with a full run")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | figure | value | floor | ratio | target |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---|")
	for _, row := range r.Rows {
		value, floor, ratio := row.Text, "", ""
		if row.Text == "" {
			value = format(row.Value, row.Unit)
			if !math.IsNaN(row.Floor) {
				floor = format(row.Floor, row.Unit)
			}
			if q := row.Ratio(); !math.IsNaN(q) {
				if strings.HasSuffix(row.Unit, "/s") {
					ratio = fmt.Sprintf("%.0f%%", 100*q)
				} else {
					ratio = fmt.Sprintf("%.2f×", q)
				}
			}
		}
		target := ""
		if row.Target != nil {
			verdict := "**missed**"
			if row.Target.Met {
				verdict = "met"
			}
			target = row.Target.Goal + ": " + verdict
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", row.Scenario, row.Figure, value, floor, ratio, target)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, r.Machine.Line())
}

// format prints a value with a sensible number of digits.
func format(v float64, unit string) string {
	var s string
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "n/a"
	case a >= 100:
		s = fmt.Sprintf("%.0f", v)
	case a >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}
