package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// waitFlags are the flags of the commands that can follow a run.
type waitFlags struct {
	wait    bool
	timeout time.Duration
	logs    bool
}

func (w *waitFlags) add(fs *flagSet) {
	fs.boolean(&w.wait, "wait", "follow the run until it ends; the exit code is the run's")
	fs.duration(&w.timeout, "timeout", "with --wait, give up after `DURATION` (e.g. 90s, 30m) with exit code 3; the run keeps going (implies --wait)")
	fs.boolean(&w.logs, "logs", "with --wait, also print the run's log lines on stderr (implies --wait)")
}

func (w waitFlags) waiting() bool { return w.wait || w.logs || w.timeout > 0 }

func (c *cli) cmdRun(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var input, metadata, key string
	var wf waitFlags
	fs.str(&input, "input", "", "the run's input: `JSON`, @FILE, or - for stdin")
	fs.str(&metadata, "metadata", "", "the run's metadata, a JSON object: `JSON` or @FILE")
	fs.str(&key, "idempotency-key", "", "trigger at most one run of FLOW per `KEY`; again, it returns the first run")
	wf.add(fs)
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.operands(ops, 1, 1); err != nil {
		return err
	}
	flowName := ops[0]
	if len(key) > 255 || !utf8.ValidString(key) || strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return usagef("--idempotency-key must be printable text of at most 255 bytes")
	}
	body := map[string]json.RawMessage{}
	if input != "" {
		v, err := c.jsonArg("--input", input, true)
		if err != nil {
			return err
		}
		body["input"] = v
	}
	if metadata != "" {
		v, err := c.jsonArg("--metadata", metadata, true)
		if err != nil {
			return err
		}
		if !isObject(v) {
			return usagef("--metadata must be a JSON object")
		}
		body["metadata"] = v
	}
	data, _ := json.Marshal(body)
	req := request{method: http.MethodPost, path: "/flows/" + pathEscape(flowName) + "/runs", body: data,
		// With a key, sending the trigger again cannot make a second run.
		retry: key != ""}
	if key != "" {
		req.header = http.Header{"Idempotency-Key": {key}}
	}
	cl := c.client()
	var r runJSON
	raw, status, err := cl.sendJSON(c.ctx, req, &r)
	if err != nil {
		return fmt.Errorf("trigger a run of %s: %w", flowName, err)
	}
	if status == http.StatusOK && key != "" {
		fmt.Fprintf(c.stderr, "maxq: idempotency key %q: run %s of %s exists already (%s)\n", key, r.ID, flowName, r.Status)
	}
	if !wf.waiting() {
		if c.globals.json() {
			return printJSON(c.stdout, raw)
		}
		_, err := fmt.Fprintln(c.stdout, r.ID)
		return err
	}
	return c.waitAndReport(cl, r, wf)
}

// waitAndReport prints the run's id (text output), follows it, and ends
// with its outcome.
func (c *cli) waitAndReport(cl *client, r runJSON, wf waitFlags) error {
	if !c.globals.json() {
		if _, err := fmt.Fprintln(c.stdout, r.ID); err != nil {
			return err
		}
		if f, ok := c.stdout.(interface{ Sync() error }); ok {
			_ = f.Sync()
		}
	}
	final, raw, err := c.follow(cl, r.ID, followOptions{timeout: wf.timeout, progress: true, logs: wf.logs})
	var te *timeoutError
	if errors.As(err, &te) {
		if c.globals.json() && raw != nil {
			_ = printJSON(c.stdout, raw)
		}
		return &exitError{code: exitTimeout, msg: te.Error()}
	}
	if err != nil {
		return err
	}
	if c.globals.json() {
		if err := printJSON(c.stdout, raw); err != nil {
			return err
		}
	}
	return c.report(final)
}

func (c *cli) cmdCancel(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.operands(ops, 1, 1); err != nil {
		return err
	}
	id := ops[0]
	var r runJSON
	raw, _, err := c.client().sendJSON(c.ctx, request{method: http.MethodPost, path: "/runs/" + pathEscape(id) + "/cancel",
		// Cancelling twice is harmless.
		retry: true}, &r)
	if err != nil {
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	if c.globals.json() {
		return printJSON(c.stdout, raw)
	}
	_, err = fmt.Fprintf(c.stdout, "run %s %s\n", r.ID, r.Status)
	return err
}

func (c *cli) cmdRetry(cmd *command, args []string) error {
	fs := c.newFlags(cmd)
	var wf waitFlags
	wf.add(fs)
	ops, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.operands(ops, 1, 1); err != nil {
		return err
	}
	id := ops[0]
	cl := c.client()
	var r runJSON
	raw, _, err := cl.sendJSON(c.ctx, request{method: http.MethodPost, path: "/runs/" + pathEscape(id) + "/retry",
		// Retrying a run that already runs again changes nothing.
		retry: true}, &r)
	if err != nil {
		return fmt.Errorf("retry run %s: %w", id, err)
	}
	if wf.waiting() {
		return c.waitAndReport(cl, r, wf)
	}
	if c.globals.json() {
		return printJSON(c.stdout, raw)
	}
	_, err = fmt.Fprintf(c.stdout, "run %s %s\n", r.ID, r.Status)
	return err
}

// jsonArg reads a JSON argument: literal JSON, @FILE, or - for stdin (when
// stdinOK), and checks that it is valid JSON.
func (c *cli) jsonArg(what, v string, stdinOK bool) (json.RawMessage, error) {
	var data []byte
	switch {
	case v == "-" && stdinOK:
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return nil, fmt.Errorf("%s: read stdin: %w", what, err)
		}
		data = b
	case strings.HasPrefix(v, "@"):
		b, err := os.ReadFile(v[1:])
		if err != nil {
			return nil, usagef("%s: %v", what, err)
		}
		data = b
	default:
		data = []byte(v)
	}
	data = bytes.TrimSpace(data)
	if err := validJSON(data); err != nil {
		return nil, usagef("%s is not valid JSON: %v", what, err)
	}
	return data, nil
}

// validJSON checks that data is exactly one JSON value, saying where it is
// not.
func validJSON(data []byte) error {
	if len(data) == 0 {
		return errors.New("it is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("%v (at byte %d)", se, se.Offset)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return errors.New("it ends too early")
		}
		return err
	}
	if dec.More() || dec.InputOffset() < int64(len(data)) {
		if _, err := dec.Token(); err != io.EOF {
			return fmt.Errorf("more than one JSON value (extra text at byte %d)", dec.InputOffset())
		}
	}
	return nil
}

func isObject(v json.RawMessage) bool {
	t := bytes.TrimSpace(v)
	return len(t) > 0 && t[0] == '{'
}
