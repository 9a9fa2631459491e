package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/maxq-dev/maxq/internal/core"
)

// display writes lines on the writer progress goes to, from several
// goroutines. On a terminal it keeps one live status line at the bottom,
// redrawn in place with \r, and writes other lines above it; elsewhere it
// writes plain lines only.
type display struct {
	mu     sync.Mutex
	w      io.Writer
	tty    bool
	width  int
	status func() string // the live line; nil for none
	shown  bool          // a live line is on screen
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newDisplay(w io.Writer, tty bool, columns string) *display {
	width, err := strconv.Atoi(columns)
	if err != nil || width < 20 {
		width = 80
	}
	return &display{w: w, tty: tty, width: width}
}

// line writes one permanent line.
func (d *display) line(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tty && d.shown {
		fmt.Fprint(d.w, "\r\x1b[K")
	}
	fmt.Fprintln(d.w, s)
	if d.tty && d.shown {
		d.drawLocked()
	}
}

// live sets the function that makes the live line (terminal only) and
// redraws it every second, so elapsed times tick.
func (d *display) live(status func() string) {
	if !d.tty {
		return
	}
	d.mu.Lock()
	d.status = status
	d.drawLocked()
	d.mu.Unlock()
	d.stop = make(chan struct{})
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
				d.redraw()
			}
		}
	}()
}

func (d *display) redraw() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drawLocked()
}

func (d *display) drawLocked() {
	if d.status == nil {
		return
	}
	s := d.status()
	if s == "" {
		return
	}
	if utf8.RuneCountInString(s) > d.width-1 {
		s = string([]rune(s)[:d.width-2]) + "…"
	}
	fmt.Fprint(d.w, "\r\x1b[K"+s)
	d.shown = true
}

// close removes the live line.
func (d *display) close() {
	if d.stop != nil {
		close(d.stop)
		d.wg.Wait()
		d.stop = nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tty && d.shown {
		fmt.Fprint(d.w, "\r\x1b[K")
	}
	d.shown, d.status = false, nil
}

// tracker turns successive snapshots of a run into progress lines: the
// steps that failed or will retry, each stage's count of finished steps,
// the stages and the run that ended.
type tracker struct {
	d      *display
	runID  string
	first  bool
	status core.RunStatus
	stages map[string]core.StageStatus // stage → status
	counts map[string]string           // stage → the counts last printed
	steps  map[string]stepJSON         // id → last seen
	cur    runJSON                     // the latest snapshot, for the live line
	byName map[string][]stepJSON       // stage → its steps, latest
	mu     sync.Mutex
}

func newTracker(d *display, runID string) *tracker {
	return &tracker{d: d, runID: runID, first: true, stages: map[string]core.StageStatus{}, counts: map[string]string{},
		steps: map[string]stepJSON{}, byName: map[string][]stepJSON{}}
}

// stageCounts is "3/10 steps done, 2 running, 1 failed".
func stageCounts(steps []stepJSON) string {
	n := map[core.StepStatus]int{}
	retrying := 0
	for _, s := range steps {
		n[s.Status]++
		if s.Status == "pending" && s.RetryCount > 0 {
			retrying++
		}
	}
	parts := []string{fmt.Sprintf("%d/%d steps done", n["completed"], len(steps))}
	if n["running"] > 0 {
		parts = append(parts, fmt.Sprintf("%d running", n["running"]))
	}
	if retrying > 0 {
		parts = append(parts, fmt.Sprintf("%d waiting to retry", retrying))
	}
	if n["failed"] > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", n["failed"]))
	}
	if n["cancelled"] > 0 {
		parts = append(parts, fmt.Sprintf("%d cancelled", n["cancelled"]))
	}
	return strings.Join(parts, ", ")
}

// observe takes a new snapshot and prints what changed.
func (t *tracker) observe(r runJSON, steps []stepJSON) {
	// The display calls liveLine, which takes t.mu, under its own lock:
	// print only after letting go of t.mu.
	for _, l := range t.changes(r, steps) {
		t.d.line(l)
	}
	t.d.redraw()
}

// changes records a new snapshot and returns the lines saying what changed.
func (t *tracker) changes(r runJSON, steps []stepJSON) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	byStage := map[string][]stepJSON{}
	for _, s := range steps {
		byStage[s.Stage] = append(byStage[s.Stage], s)
	}
	if t.first {
		out = append(out, fmt.Sprintf("run %s (flow %s) %s", r.ID, r.FlowName, r.Status))
	} else if r.Status != t.status && !r.terminal() {
		out = append(out, fmt.Sprintf("run %s %s", r.ID, r.Status))
	}
	// Steps that failed, for good or for a retry.
	sorted := append([]stepJSON(nil), steps...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Name != sorted[j].Name {
			return sorted[i].Name < sorted[j].Name
		}
		return sorted[i].Sequence < sorted[j].Sequence
	})
	for _, s := range sorted {
		prev, seen := t.steps[s.ID]
		t.steps[s.ID] = s
		if s.RetryCount > prev.RetryCount && !s.terminal() {
			msg := fmt.Sprintf("step %s failed (retry %d/%d)", s.label(), s.RetryCount, s.MaxRetries)
			if e := errorSummary(s.Error); e != "" {
				msg += ": " + e
			}
			out = append(out, msg)
		}
		if s.Status == "failed" && (!seen || prev.Status != "failed") {
			msg := fmt.Sprintf("step %s failed", s.label())
			if s.MaxRetries > 0 {
				msg += fmt.Sprintf(" after %d retries", s.RetryCount)
			}
			if e := errorSummary(s.Error); e != "" {
				msg += ": " + e
			}
			out = append(out, msg)
		}
	}
	// Stages: progress (plain output only) and their end.
	for _, g := range r.Stages {
		counts := stageCounts(byStage[g.Name])
		prev := t.stages[g.Name]
		switch {
		case g.Status.Terminal() && prev != g.Status:
			msg := fmt.Sprintf("stage %s %s: %s", g.Name, g.Status, counts)
			if g.CompletedAt != nil {
				msg += " in " + formatDuration(time.Duration(*g.CompletedAt-g.CreatedAt)*time.Millisecond)
			}
			out = append(out, msg)
		case !g.Status.Terminal() && !t.d.tty && counts != t.counts[g.Name]:
			out = append(out, fmt.Sprintf("stage %s %s: %s", g.Name, g.Status, counts))
		}
		t.stages[g.Name] = g.Status
		t.counts[g.Name] = counts
	}
	t.status, t.cur, t.byName, t.first = r.Status, r, byStage, false
	return out
}

// liveLine is the terminal's status line: the run, how long it has run,
// and each stage still going.
func (t *tracker) liveLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.cur
	if r.ID == "" {
		return "" // no snapshot yet
	}
	s := fmt.Sprintf("run %s %s", shortID(r.ID), r.Status)
	if d := durationOf(r.DurationMs, r.StartedAt, time.Now()); d != "" {
		s += " " + d
	}
	for _, g := range r.Stages {
		if !g.Status.Terminal() {
			s += fmt.Sprintf(" · stage %s: %s", g.Name, stageCounts(t.byName[g.Name]))
		}
	}
	return s
}

// shortID shortens a long id for the live line.
func shortID(id string) string {
	if len(id) > 13 {
		return id[:13] + "…"
	}
	return id
}
