package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
)

// runFlag is --run, for the commands scripts use (default MAXQ_RUN_ID).
func (c *cli) runFlag(fs *flagSet, p *string) {
	fs.str(p, "run", "", "the `RUN` (default $MAXQ_RUN_ID)")
}

func (c *cli) needRun(cmd *command, run string) (string, error) {
	if run = firstOf(run, c.env("MAXQ_RUN_ID")); run == "" {
		return "", usagef("%s: no run: MAXQ_RUN_ID is not set (run it from flow.sh or step.sh) and --run is not given", cmd.name)
	}
	return run, nil
}

func (c *cli) cmdStageSchedule(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var run, stage, file string
	var final bool
	var specs []string
	c.runFlag(fs, &run)
	fs.str(&stage, "stage", "", "the stage's `NAME`")
	fs.boolean(&final, "final", "the run's last stage: the run completes when it does")
	fs.list(&specs, "step", "a step: `SPEC` is NAME[:instances=N,maxRetries=N,dependsOn=A+B,timeout=SECONDS,env.KEY=VALUE]")
	fs.str(&file, "file", "", "send `FILE` (- for stdin) as the request body instead: {\"stage\", \"final\", \"steps\"}")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.operands(ops, 0, 0); err != nil {
		return err
	}
	if run, err = c.needRun(cmd, run); err != nil {
		return err
	}
	var body []byte
	if file != "" {
		if stage != "" || final || len(specs) > 0 {
			return usagef("stage schedule: --file is the whole request; leave out --stage, --final and --step")
		}
		arg := "@" + file
		if file == "-" {
			arg = "-"
		}
		raw, err := c.jsonArg("--file", arg, true)
		if err != nil {
			return err
		}
		if !isObject(raw) {
			return usagef("--file must hold a JSON object: {\"stage\", \"final\", \"steps\"}")
		}
		body = raw
	} else {
		if stage == "" {
			return usagef("stage schedule: --stage is required (or give --file)")
		}
		if len(specs) == 0 {
			return usagef("stage schedule: give at least one --step (or --file)")
		}
		steps := make([]stepSpec, 0, len(specs))
		var errs []error
		for _, s := range specs {
			st, err := parseStepSpec(s)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			steps = append(steps, st)
		}
		if err := errors.Join(errs...); err != nil {
			return usagef("%s", strings.ReplaceAll(err.Error(), "\n", "; "))
		}
		body, _ = json.Marshal(map[string]any{"stage": stage, "final": final, "steps": steps})
	}
	raw, _, err := c.client().sendJSON(c.ctx, request{method: http.MethodPost, path: "/runs/" + pathEscape(run) + "/steps", body: body}, nil)
	if err != nil {
		what := "schedule stage"
		if stage != "" {
			what += " " + stage
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if c.globals.json() {
		return printJSON(c.stdout, raw)
	}
	return nil
}

// stepSpec is one step of a stage request.
type stepSpec struct {
	Name       string            `json:"name"`
	Instances  int               `json:"instances"`
	MaxRetries int               `json:"maxRetries"`
	DependsOn  []string          `json:"dependsOn"`
	Env        map[string]string `json:"env"`
}

// parseStepSpec reads NAME[:KEY=VALUE,…]; "\," is a comma inside a value
// and "\\" a backslash.
func parseStepSpec(spec string) (stepSpec, error) {
	name, rest, _ := strings.Cut(spec, ":")
	st := stepSpec{Name: name, Instances: 1, DependsOn: []string{}, Env: map[string]string{}}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("--step %q: %s", spec, fmt.Sprintf(format, args...))
	}
	if name == "" {
		return st, bad("the step's name comes first, e.g. fetch_urls:instances=2")
	}
	if rest == "" {
		return st, nil
	}
	var errs []error
	for _, item := range splitEscaped(rest, ',') {
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			errs = append(errs, bad("%q is not KEY=VALUE", item))
			continue
		}
		switch {
		case k == "instances":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				errs = append(errs, bad("instances must be a whole number, 1 or more, not %q", v))
			}
			st.Instances = n
		case k == "maxRetries" || k == "retries":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				errs = append(errs, bad("%s must be a whole number, 0 or more, not %q", k, v))
			}
			st.MaxRetries = n
		case k == "dependsOn":
			for _, d := range strings.Split(v, "+") {
				if d = strings.TrimSpace(d); d != "" {
					st.DependsOn = append(st.DependsOn, d)
				}
			}
		case k == "timeout":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				errs = append(errs, bad("timeout must be a whole number of seconds, 1 or more, not %q", v))
			}
			st.Env["MAXQ_STEP_TIMEOUT"] = v
		case strings.HasPrefix(k, "env."):
			key := strings.TrimPrefix(k, "env.")
			if key == "" {
				errs = append(errs, bad("env. needs a variable name: env.KEY=VALUE"))
			}
			st.Env[key] = v
		default:
			errs = append(errs, bad("unknown key %q (instances, maxRetries, dependsOn, timeout, env.KEY)", k))
		}
	}
	return st, errors.Join(errs...)
}

// splitEscaped splits s at sep, except where sep is escaped with a
// backslash; "\\" is a backslash.
func splitEscaped(s string, sep byte) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && (s[i+1] == sep || s[i+1] == '\\'):
			cur.WriteByte(s[i+1])
			i++
		case s[i] == sep:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(out, cur.String())
}

// thisStep is the step instance a script runs as, from MAXQ_STEP_* and
// the flags that override them.
type thisStep struct {
	id       string
	name     string
	sequence int
	attempt  int // MAXQ_STEP_ATTEMPT when the step is this script's own; else 0
}

// ownAttempt is MAXQ_STEP_ATTEMPT, when stepID is MAXQ_STEP_ID: sent with a
// write, it makes the API refuse it (409) once another attempt of the step
// has taken over, so a superseded script cannot store what the current
// attempt will.
func (c *cli) ownAttempt(stepID string) int {
	if stepID == "" || stepID != c.env("MAXQ_STEP_ID") {
		return 0
	}
	n, err := strconv.Atoi(c.env("MAXQ_STEP_ATTEMPT"))
	if err != nil || n < 1 {
		return 0
	}
	return n
}

func (c *cli) cmdArtifactPut(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var run, value, metadata, stepID, step string
	var tags []string
	c.runFlag(fs, &run)
	fs.str(&value, "value", "", "the artifact's value: `JSON`, @FILE, or - for stdin (required)")
	fs.list(&tags, "tag", "a `TAG` of the artifact")
	fs.str(&metadata, "metadata", "", "a JSON object of metadata: `JSON` or @FILE")
	fs.str(&stepID, "step-id", "", "the step instance's `ID` (default $MAXQ_STEP_ID)")
	fs.str(&step, "step", "", "the step instance, `NAME[SEQ]` (default $MAXQ_STEP_NAME[$MAXQ_STEP_SEQUENCE])")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.operands(ops, 1, 1); err != nil {
		return err
	}
	name := ops[0]
	if value == "" {
		return usagef("artifact put: --value is required (JSON, @FILE, or - for stdin)")
	}
	if run, err = c.needRun(cmd, run); err != nil {
		return err
	}
	me, err := c.thisStep(cmd, stepID, step)
	if err != nil {
		return err
	}
	v, err := c.jsonArg("--value", value, true)
	if err != nil {
		return err
	}
	if string(v) == "null" {
		return usagef("--value may be any JSON but null")
	}
	body := map[string]any{"stepId": me.id, "stepName": me.name, "sequence": me.sequence, "name": name,
		"value": v, "tags": append([]string{}, tags...)}
	if me.attempt > 0 {
		body["attempt"] = me.attempt
	}
	if metadata != "" {
		m, err := c.jsonArg("--metadata", metadata, false)
		if err != nil {
			return err
		}
		if !isObject(m) {
			return usagef("--metadata must be a JSON object")
		}
		body["metadata"] = m
	}
	data, _ := json.Marshal(body)
	cl := c.client()
	path := "/runs/" + pathEscape(run) + "/artifacts"
	raw, status, err := cl.sendJSON(c.ctx, request{method: http.MethodPost, path: path, body: data}, nil)
	if status == http.StatusConflict {
		// Stored already, by an earlier try of this very command? Then
		// there is nothing to do.
		if stored, ok := c.storedArtifact(cl, run, me, name); ok && sameJSON(stored.Value, v) {
			raw, err = stored.raw, nil
		}
	}
	if err != nil {
		return fmt.Errorf("store artifact %s[%d]/%s: %w", me.name, me.sequence, name, err)
	}
	if c.globals.json() {
		return printJSON(c.stdout, raw)
	}
	return nil
}

// thisStep resolves the step instance of artifact put.
func (c *cli) thisStep(cmd *command, stepID, step string) (thisStep, error) {
	me := thisStep{id: firstOf(stepID, c.env("MAXQ_STEP_ID"))}
	if step != "" {
		n, seq, ok := parseStepRef(step)
		if !ok {
			return me, usagef("%s: --step must be NAME[SEQ], e.g. fetch[0]", cmd.name)
		}
		me.name, me.sequence = n, seq
	} else {
		me.name = c.env("MAXQ_STEP_NAME")
		seq := c.env("MAXQ_STEP_SEQUENCE")
		n, err := strconv.Atoi(seq)
		if me.name == "" || err != nil {
			return me, usagef("%s: MAXQ_STEP_NAME and MAXQ_STEP_SEQUENCE are not set: run it from step.sh, or give --step NAME[SEQ]", cmd.name)
		}
		me.sequence = n
	}
	if me.id == "" {
		return me, usagef("%s: MAXQ_STEP_ID is not set: run it from step.sh, or give --step-id", cmd.name)
	}
	me.attempt = c.ownAttempt(me.id)
	return me, nil
}

type storedValue struct {
	Value json.RawMessage
	raw   []byte
}

// storedArtifact reads the artifact at me/name, if there is one.
func (c *cli) storedArtifact(cl *client, run string, me thisStep, name string) (storedValue, bool) {
	q := url.Values{"stepName": {me.name}, "sequence": {strconv.Itoa(me.sequence)}, "name": {name}, "limit": {"1"}}
	var out struct {
		Artifacts []json.RawMessage `json:"artifacts"`
	}
	if _, err := cl.getJSON(c.ctx, "/runs/"+pathEscape(run)+"/artifacts", q, &out); err != nil || len(out.Artifacts) == 0 {
		return storedValue{}, false
	}
	var a artifactJSON
	if json.Unmarshal(out.Artifacts[0], &a) != nil {
		return storedValue{}, false
	}
	return storedValue{Value: a.Value, raw: out.Artifacts[0]}, true
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b json.RawMessage) bool {
	decode := func(r json.RawMessage) (any, bool) {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.UseNumber()
		var v any
		return v, dec.Decode(&v) == nil
	}
	x, ok1 := decode(a)
	y, ok2 := decode(b)
	return ok1 && ok2 && reflect.DeepEqual(normalizeNumbers(x), normalizeNumbers(y))
}

// normalizeNumbers turns json.Numbers into a canonical text, so 1.0 and 1
// compare equal (PostgreSQL's jsonb may rewrite numbers).
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return x.String()
	case []any:
		for i := range x {
			x[i] = normalizeNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalizeNumbers(x[k])
		}
	}
	return v
}

func (c *cli) cmdArtifactGet(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var run, step, name, field string
	var sequence int
	var all bool
	c.runFlag(fs, &run)
	fs.str(&step, "step", "", "the step that stored it: `STEP` or STEP[SEQ] (required)")
	fs.str(&name, "name", "", "the artifact's `NAME` (required)")
	fs.integer(&sequence, "sequence", -1, "the step instance, `K` (default 0, or the SEQ of --step)")
	fs.boolean(&all, "all", "print a JSON array of the values of every instance of the step, by sequence")
	fs.str(&field, "field", "", "print only the part of the value at `PATH`, e.g. .items[0].name")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.operands(ops, 0, 0); err != nil {
		return err
	}
	if step == "" || name == "" {
		return usagef("artifact get: --step and --name are required")
	}
	if run, err = c.needRun(cmd, run); err != nil {
		return err
	}
	stepName, seq, _ := parseStepRef(step)
	if sequence >= 0 {
		if seq >= 0 && seq != sequence {
			return usagef("artifact get: --step %s and --sequence %d disagree", step, sequence)
		}
		seq = sequence
	}
	if all && seq >= 0 {
		return usagef("artifact get: --all reads every instance; leave out the sequence")
	}
	cl := c.client()
	path := "/runs/" + pathEscape(run) + "/artifacts"
	q := url.Values{"stepName": {stepName}, "name": {name}, "sortBy": {"sequence"}}
	if all {
		raw, _, err := listAll(c.ctx, cl, path, q, "artifacts", 1000)
		if err != nil {
			return fmt.Errorf("read artifacts %s[*]/%s: %w", stepName, name, err)
		}
		values := make([]any, 0, len(raw))
		for _, r := range raw {
			var a artifactJSON
			if err := json.Unmarshal(r, &a); err != nil {
				return fmt.Errorf("the API answered an unexpected artifact: %w", err)
			}
			v, err := extract(a.Value, field)
			if err != nil {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("artifact %s: %v", a.FullPath, err)}
			}
			values = append(values, v)
		}
		b, err := marshalNoEscape(values)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.stdout, string(b))
		return err
	}
	seq = max(seq, 0)
	q.Set("sequence", strconv.Itoa(seq))
	q.Set("limit", "1")
	var out struct {
		Artifacts []artifactJSON `json:"artifacts"`
	}
	if _, err := cl.getJSON(c.ctx, path, q, &out); err != nil {
		return fmt.Errorf("read artifact %s[%d]/%s: %w", stepName, seq, name, err)
	}
	if len(out.Artifacts) == 0 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("run %s has no artifact %s[%d]/%s", run, stepName, seq, name)}
	}
	return c.printValueOrField(out.Artifacts[0].Value, field)
}

// printValueOrField prints a value (a string raw, anything else as compact
// JSON), or the part of it at field.
func (c *cli) printValueOrField(v json.RawMessage, field string) error {
	if field == "" {
		field = "."
	}
	return c.printField(v, field, c.globals.json())
}

func (c *cli) cmdOutput(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var stepID string
	fs.str(&stepID, "step-id", "", "the step instance's `ID` (default $MAXQ_STEP_ID)")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.operands(ops, 1, 1); err != nil {
		return err
	}
	if stepID = firstOf(stepID, c.env("MAXQ_STEP_ID")); stepID == "" {
		return usagef("output: MAXQ_STEP_ID is not set: run it from step.sh, or give --step-id")
	}
	v, err := c.jsonArg("the output", ops[0], true)
	if err != nil {
		return err
	}
	req := map[string]any{"output": v}
	if attempt := c.ownAttempt(stepID); attempt > 0 {
		req["attempt"] = attempt
	}
	body, _ := json.Marshal(req)
	raw, _, err := c.client().sendJSON(c.ctx, request{method: http.MethodPatch, path: "/steps/" + pathEscape(stepID), body: body}, nil)
	if err != nil {
		return fmt.Errorf("set the output of step %s: %w", stepID, err)
	}
	if c.globals.json() {
		return printJSON(c.stdout, raw)
	}
	return nil
}

func (c *cli) cmdInput(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var field string
	fs.str(&field, "field", "", "print only the part of the input at `PATH`, e.g. .urls[0]")
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	id, err := c.runArg(fs, ops)
	if err != nil {
		return err
	}
	r, _, err := c.getRun(c.ctx, c.client(), id)
	if err != nil {
		return err
	}
	input := r.Input
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("null")
	}
	return c.printValueOrField(input, field)
}
