package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
)

func (c *cli) cmdLogs(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var step string
	var follow bool
	fs.str(&step, "step", "", "only the lines of `STEP` (every instance), STEP[SEQ] (one instance) or a step id")
	fs.boolean(&follow, "follow", "keep printing new lines until the run has ended")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	id, err := c.runArg(fs, ops)
	if err != nil {
		return err
	}
	cl := c.client()
	stepID, keep, err := c.resolveStep(cl, id, step)
	if err != nil {
		return err
	}

	var lines []json.RawMessage
	emit := func(l logJSON, raw json.RawMessage) {
		switch {
		case c.globals.json() && follow:
			buf, _ := json.Marshal(raw) // compact
			fmt.Fprintln(c.stdout, string(buf))
		case c.globals.json():
			lines = append(lines, raw)
		default:
			fmt.Fprintln(c.stdout, l.prefix()+" "+l.Message)
		}
	}
	t := newTailer(cl, id, stepID, emit)
	t.keep = keep
	if !follow {
		if err := t.poll(c.ctx); err != nil {
			return err
		}
		if c.globals.json() {
			if lines == nil {
				lines = []json.RawMessage{}
			}
			return printValue(c.stdout, map[string]any{"logs": lines, "next": t.cursor})
		}
		return nil
	}

	// Follow: one goroutine waits (long poll) for the run to end, while
	// this one tails its log.
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	ended := make(chan struct{})
	watchErr := make(chan error, 1)
	go func() {
		version := ""
		for {
			r, _, err := c.pollRun(ctx, cl, id, version, nil)
			if err != nil {
				watchErr <- err
				cancel()
				return
			}
			if r.terminal() {
				if r.Status == "cancelled" {
					t.settle = cancelSettle
				}
				watchErr <- nil
				close(ended)
				return
			}
			version = r.Version
		}
	}()
	tailErr := t.until(ctx, ended)
	cancel()
	if err := <-watchErr; err != nil {
		return err
	}
	return tailErr
}

// resolveStep turns --step into a step id for the API's filter, or a
// filter on the step's name (for every instance of a step).
func (c *cli) resolveStep(cl *client, runID, step string) (string, func(logJSON) bool, error) {
	if step == "" {
		return "", nil, nil
	}
	steps := "/runs/" + pathEscape(runID) + "/steps"
	if name, seq, ok := parseStepRef(step); ok {
		var out struct {
			Steps []stepJSON `json:"steps"`
		}
		q := url.Values{"name": {name}, "sequence": {strconv.Itoa(seq)}, "limit": {"1"}}
		if _, err := cl.getJSON(c.ctx, steps, q, &out); err != nil {
			return "", nil, fmt.Errorf("find step %s of run %s: %w", step, runID, err)
		}
		if len(out.Steps) == 0 {
			return "", nil, &exitError{code: exitUsage, msg: fmt.Sprintf("run %s has no step %s", runID, step)}
		}
		return out.Steps[0].ID, nil, nil
	}
	var out struct {
		Steps      []stepJSON     `json:"steps"`
		Pagination paginationJSON `json:"pagination"`
	}
	// A name: every instance of the step.
	if _, err := cl.getJSON(c.ctx, steps, url.Values{"name": {step}, "limit": {"2"}}, &out); err == nil && len(out.Steps) > 0 {
		if out.Pagination.Total == 1 {
			return out.Steps[0].ID, nil, nil
		}
		return "", func(l logJSON) bool { return l.StepName != nil && *l.StepName == step }, nil
	}
	// Else a step id.
	var st struct {
		ID    string `json:"id"`
		RunID string `json:"runId"`
	}
	if _, err := cl.getJSON(c.ctx, "/steps/"+pathEscape(step), nil, &st); err == nil && st.RunID == runID {
		return st.ID, nil, nil
	}
	return "", nil, &exitError{code: exitUsage, msg: fmt.Sprintf("run %s has no step %s (give a name, name[seq] or a step id)", runID, step)}
}
