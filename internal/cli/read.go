package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

func (c *cli) cmdFlows(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.operands(ops, 0, 0); err != nil {
		return err
	}
	var out struct {
		Flows []struct {
			Name  string   `json:"name"`
			Path  string   `json:"path"`
			Steps []string `json:"steps"`
		} `json:"flows"`
		Problems []struct {
			Path    string `json:"path"`
			Message string `json:"message"`
		} `json:"problems"`
	}
	raw, err := c.client().getJSON(c.ctx, "/flows", nil, &out)
	if err != nil {
		return fmt.Errorf("list flows: %w", err)
	}
	if c.globals.json() {
		return printJSON(c.stdout, raw)
	}
	t := newTable(c.stdout, "FLOW", "STEPS")
	for _, f := range out.Flows {
		t.row(f.Name, strings.Join(f.Steps, ", "))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(out.Problems) > 0 {
		fmt.Fprintln(c.stdout, "\nProblems:")
		for _, p := range out.Problems {
			fmt.Fprintf(c.stdout, "  %s: %s\n", p.Path, p.Message)
		}
	}
	return nil
}

func (c *cli) cmdRuns(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var flowName, status string
	var limit, offset int
	fs.str(&flowName, "flow", "", "only runs of `FLOW`")
	fs.str(&status, "status", "", "only runs in `STATUS`: pending, running, completed, failed or cancelled")
	fs.integer(&limit, "limit", 20, "at most `N` runs, 1 to 100")
	fs.integer(&offset, "offset", 0, "skip the first `N` runs")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.operands(ops, 0, 0); err != nil {
		return err
	}
	if limit < 1 || limit > 100 {
		return usagef("runs: --limit must be from 1 to 100, not %d", limit)
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}, "offset": {strconv.Itoa(offset)}}
	if flowName != "" {
		q.Set("flowName", flowName)
	}
	if status != "" {
		q.Set("status", status)
	}
	var out struct {
		Runs       []runJSON      `json:"runs"`
		Pagination paginationJSON `json:"pagination"`
	}
	raw, err := c.client().getJSON(c.ctx, "/runs", q, &out)
	if err != nil {
		return fmt.Errorf("list runs: %w", err)
	}
	if c.globals.json() {
		return printJSON(c.stdout, raw)
	}
	now := time.Now()
	t := newTable(c.stdout, "RUN", "FLOW", "STATUS", "CREATED", "DURATION")
	for _, r := range out.Runs {
		t.row(r.ID, r.FlowName, string(r.Status), formatTime(r.CreatedAt), durationOf(r.DurationMs, r.StartedAt, now))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if shown := out.Pagination.Offset + len(out.Runs); shown < out.Pagination.Total {
		fmt.Fprintf(c.stderr, "(%d of %d runs; --offset %d for more)\n", len(out.Runs), out.Pagination.Total, shown)
	}
	return nil
}

// getRun reads a run with its stages.
func (c *cli) getRun(ctx context.Context, cl *client, id string) (runJSON, []byte, error) {
	var r runJSON
	raw, err := cl.getJSON(ctx, "/runs/"+pathEscape(id), nil, &r)
	if err != nil {
		return r, nil, fmt.Errorf("get run %s: %w", id, err)
	}
	return r, raw, nil
}

// listAll reads every page of a list (key is "steps" or "artifacts") and
// returns the items and the total.
func listAll(ctx context.Context, cl *client, path string, q url.Values, key string, pageSize int) ([]json.RawMessage, int, error) {
	q = cloneValues(q)
	q.Set("limit", strconv.Itoa(pageSize))
	q.Set("sortOrder", "asc")
	var items []json.RawMessage
	seen := map[string]bool{}
	for offset := 0; ; {
		q.Set("offset", strconv.Itoa(offset))
		var page map[string]json.RawMessage
		if _, err := cl.getJSON(ctx, path, q, &page); err != nil {
			return nil, 0, err
		}
		var list []json.RawMessage
		var pg paginationJSON
		if err := json.Unmarshal(page[key], &list); err != nil {
			return nil, 0, fmt.Errorf("the API's answer has no %s list: %w", key, err)
		}
		if err := json.Unmarshal(page["pagination"], &pg); err != nil {
			return nil, 0, fmt.Errorf("the API's answer has no pagination: %w", err)
		}
		for _, it := range list {
			var id struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(it, &id)
			if id.ID != "" && seen[id.ID] {
				continue
			}
			seen[id.ID] = true
			items = append(items, it)
		}
		offset += len(list)
		if len(list) == 0 || offset >= pg.Total {
			return items, max(pg.Total, len(items)), nil
		}
	}
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// listSteps reads all of a run's steps that match q.
func (c *cli) listSteps(ctx context.Context, cl *client, runID string, q url.Values) ([]stepJSON, []json.RawMessage, error) {
	raw, _, err := listAll(ctx, cl, "/runs/"+pathEscape(runID)+"/steps", q, "steps", 1000)
	if err != nil {
		return nil, nil, err
	}
	steps := make([]stepJSON, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &steps[i]); err != nil {
			return nil, nil, fmt.Errorf("the API answered an unexpected step: %w", err)
		}
	}
	return steps, raw, nil
}

// printList prints a list the way the API answers one, with every item.
func (c *cli) printList(key string, items []json.RawMessage) error {
	if items == nil {
		items = []json.RawMessage{}
	}
	return printValue(c.stdout, map[string]any{key: items,
		"pagination": paginationJSON{Total: len(items), Limit: len(items), Offset: 0}})
}

func (c *cli) cmdStatus(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	id, err := c.runArg(fs, ops)
	if err != nil {
		return err
	}
	cl := c.client()
	r, raw, err := c.getRun(c.ctx, cl, id)
	if err != nil {
		return err
	}
	if c.globals.json() {
		return printJSON(c.stdout, raw)
	}
	steps, _, err := c.listSteps(c.ctx, cl, id, nil)
	if err != nil {
		return fmt.Errorf("list steps of run %s: %w", id, err)
	}
	return printTree(c.stdout, r, steps, time.Now())
}

// printTree prints a run, then each stage and its steps.
func printTree(w io.Writer, r runJSON, steps []stepJSON, now time.Time) error {
	fmt.Fprintf(w, "Run %s  flow %s  %s", r.ID, r.FlowName, r.Status)
	if d := durationOf(r.DurationMs, r.StartedAt, now); d != "" {
		fmt.Fprintf(w, "  %s", d)
	}
	fmt.Fprintf(w, "  created %s\n", formatTime(r.CreatedAt))
	if e := errorSummary(r.Error); e != "" {
		fmt.Fprintf(w, "Error: %s\n", e)
	}
	if len(r.Stages) == 0 {
		fmt.Fprintln(w, "No stages scheduled yet.")
		return nil
	}
	byStage := map[string][]stepJSON{}
	for _, s := range steps {
		byStage[s.Stage] = append(byStage[s.Stage], s)
	}
	fmt.Fprintln(w)
	t := newTable(w, "STAGE / STEP", "STATUS", "RETRIES", "DURATION", "ERROR")
	for _, g := range r.Stages {
		ss := byStage[g.Name]
		sort.SliceStable(ss, func(i, j int) bool {
			if ss[i].CreatedAt != ss[j].CreatedAt {
				return ss[i].CreatedAt < ss[j].CreatedAt
			}
			if ss[i].Name != ss[j].Name {
				return ss[i].Name < ss[j].Name
			}
			return ss[i].Sequence < ss[j].Sequence
		})
		done := 0
		for _, s := range ss {
			if s.Status == "completed" {
				done++
			}
		}
		label := g.Name
		if g.Final {
			label += " (final)"
		}
		var dur string
		if g.CompletedAt != nil {
			dur = formatDuration(time.Duration(*g.CompletedAt-g.CreatedAt) * time.Millisecond)
		}
		t.row(label, fmt.Sprintf("%s %d/%d", g.Status, done, len(ss)), "", dur, "")
		for i, s := range ss {
			branch := "├─ "
			if i == len(ss)-1 {
				branch = "└─ "
			}
			t.row(branch+s.label(), string(s.Status), fmt.Sprintf("%d/%d", s.RetryCount, s.MaxRetries),
				durationOf(s.DurationMs, s.StartedAt, now), errorSummary(s.Error))
		}
	}
	return t.flush()
}

func (c *cli) cmdSteps(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var stage, status, name string
	fs.str(&stage, "stage", "", "only steps of `STAGE`")
	fs.str(&status, "status", "", "only steps in `STATUS`: pending, running, completed, failed or cancelled")
	fs.str(&name, "name", "", "only instances of step `STEP`")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	id, err := c.runArg(fs, ops)
	if err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"stage": stage, "status": status, "name": name} {
		if v != "" {
			q.Set(k, v)
		}
	}
	steps, raw, err := c.listSteps(c.ctx, c.client(), id, q)
	if err != nil {
		return fmt.Errorf("list steps of run %s: %w", id, err)
	}
	if c.globals.json() {
		return c.printList("steps", raw)
	}
	now := time.Now()
	t := newTable(c.stdout, "STEP", "STAGE", "STATUS", "RETRIES", "ATTEMPT", "DURATION", "EXIT", "ID")
	for _, s := range steps {
		exit := ""
		if s.ExitCode != nil {
			exit = strconv.Itoa(*s.ExitCode)
		}
		t.row(s.label(), s.Stage, string(s.Status), fmt.Sprintf("%d/%d", s.RetryCount, s.MaxRetries), strconv.Itoa(s.Attempt),
			durationOf(s.DurationMs, s.StartedAt, now), exit, s.ID)
	}
	return t.flush()
}

// stepRef is "name[seq]" split, or a bare name (seq -1).
var stepRef = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9_.-]*)\[(\d+)\]$`)

func parseStepRef(s string) (name string, seq int, ok bool) {
	if m := stepRef.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[2])
		if err == nil {
			return m[1], n, true
		}
	}
	return s, -1, false
}

func (c *cli) cmdArtifacts(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var step, name string
	var tags []string
	fs.str(&step, "step", "", "only artifacts of step `STEP` (every instance), or of one instance: STEP[SEQ]")
	fs.str(&name, "name", "", "only artifacts called `NAME`")
	fs.list(&tags, "tag", "only artifacts with `TAG` (any of those given)")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	id, err := c.runArg(fs, ops)
	if err != nil {
		return err
	}
	q := url.Values{"sortBy": {"createdAt"}}
	if step != "" {
		n, seq, _ := parseStepRef(step)
		q.Set("stepName", n)
		if seq >= 0 {
			q.Set("sequence", strconv.Itoa(seq))
		}
	}
	if name != "" {
		q.Set("name", name)
	}
	if len(tags) > 0 {
		q.Set("tags", strings.Join(tags, ","))
	}
	raw, _, err := listAll(c.ctx, c.client(), "/runs/"+pathEscape(id)+"/artifacts", q, "artifacts", 100)
	if err != nil {
		return fmt.Errorf("list artifacts of run %s: %w", id, err)
	}
	if c.globals.json() {
		return c.printList("artifacts", raw)
	}
	t := newTable(c.stdout, "PATH", "SIZE", "TAGS", "CREATED", "ID")
	for _, r := range raw {
		var a artifactJSON
		if err := json.Unmarshal(r, &a); err != nil {
			return fmt.Errorf("the API answered an unexpected artifact: %w", err)
		}
		t.row(a.FullPath, strconv.Itoa(len(a.Value))+"B", strings.Join(a.Tags, ","), formatTime(a.CreatedAt), a.ID)
	}
	return t.flush()
}

// cmdArtifact is "maxq artifact [RUN] ID": one artifact's value.
func (c *cli) cmdArtifact(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var field string
	fs.str(&field, "field", "", "print only the part of the value at `PATH`, e.g. .items[0].name")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	var runID, artID string
	switch len(ops) {
	case 2:
		runID, artID = ops[0], ops[1]
	case 1:
		runID, artID = c.env("MAXQ_RUN_ID"), ops[0]
		if runID == "" {
			return usagef("artifact: missing RUN or ID (usage: maxq artifact RUN ID, or maxq artifact put|get)")
		}
	case 0:
		return usagef("artifact: missing RUN and ID (usage: maxq artifact RUN ID, or maxq artifact put|get)")
	default:
		return usagef("artifact: unexpected argument %q (usage: maxq %s %s)", ops[2], cmd.name, cmd.args)
	}
	var a artifactJSON
	if _, err := c.client().getJSON(c.ctx, "/runs/"+pathEscape(runID)+"/artifacts/"+pathEscape(artID), nil, &a); err != nil {
		return fmt.Errorf("get artifact %s of run %s: %w", artID, runID, err)
	}
	if field == "" {
		return printJSON(c.stdout, a.Value)
	}
	return c.printField(a.Value, field, false)
}

// printField prints the part of value at path: a string raw (unless
// asJSON), anything else as JSON.
func (c *cli) printField(value json.RawMessage, path string, asJSON bool) error {
	v, err := extract(value, path)
	if err != nil {
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	if s, ok := v.(string); ok && !asJSON {
		_, err := fmt.Fprintln(c.stdout, s)
		return err
	}
	b, err := marshalNoEscape(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, string(b))
	return err
}
