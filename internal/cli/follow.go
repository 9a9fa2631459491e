package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Following a run.
const (
	// outageBudget is how long a follower keeps trying while the API does
	// not answer, before it gives up.
	outageBudget = 5 * time.Minute
	// minPollGap spaces the snapshots of a run that changes all the time.
	minPollGap = 500 * time.Millisecond
	// tailEvery is how often a tailer asks for new log lines.
	tailEvery = 500 * time.Millisecond
	// logPage is how many log lines one request asks for.
	logPage = 1000
	// cancelSettle is how long after a run was cancelled the last lines of
	// its stopped scripts may still arrive.
	cancelSettle = 2 * time.Second
)

// pollRun reads a run, waiting first (long poll) for it to differ from
// version when version is not empty. It rides out an API that does not
// answer for up to outageBudget, saying so once on d.
func (c *cli) pollRun(ctx context.Context, cl *client, id, version string, d *display) (runJSON, []byte, error) {
	q := url.Values{}
	var wait time.Duration
	if version != "" {
		wait = longPollWait
		q.Set("waitForChangeMs", strconv.Itoa(int(wait.Milliseconds())))
		q.Set("version", version)
	}
	var since time.Time
	for attempt := 1; ; attempt++ {
		data, _, err := cl.do(ctx, request{method: http.MethodGet, path: "/runs/" + pathEscape(id), query: q, retry: true, wait: wait})
		if err == nil {
			var r runJSON
			if err := json.Unmarshal(data, &r); err != nil {
				return r, nil, fmt.Errorf("get run %s: the API answered something that is not a run: %w", id, err)
			}
			if !since.IsZero() && d != nil {
				d.line("the API answers again")
			}
			return r, data, nil
		}
		if !transient(err) || ctx.Err() != nil {
			return runJSON{}, nil, fmt.Errorf("get run %s: %w", id, err)
		}
		if since.IsZero() {
			since = time.Now()
			if d != nil {
				d.line(fmt.Sprintf("the API does not answer (%v); still trying", err))
			}
		}
		if time.Since(since) > outageBudget {
			return runJSON{}, nil, fmt.Errorf("get run %s: gave up after %s: %w", id, outageBudget, err)
		}
		if sleep(ctx, min(time.Duration(attempt)*2*time.Second, 10*time.Second)) != nil {
			return runJSON{}, nil, fmt.Errorf("get run %s: %w", id, ctx.Err())
		}
	}
}

// followOptions say how to follow a run.
type followOptions struct {
	timeout  time.Duration // 0: no limit
	progress bool          // print progress on stderr
	logs     bool          // print the run's log lines on stderr
}

// timeoutError is --timeout passing.
type timeoutError struct {
	runID   string
	timeout time.Duration
	status  string
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("timed out after %s waiting for run %s (%s); the run keeps going: maxq status %s",
		e.timeout, e.runID, e.status, e.runID)
}

// follow follows run id until it ends, printing progress and logs on
// stderr, and returns its last snapshot. It returns a *timeoutError if
// o.timeout passes first.
func (c *cli) follow(cl *client, id string, o followOptions) (runJSON, []byte, error) {
	ctx, cancel := c.ctx, context.CancelFunc(func() {})
	if o.timeout > 0 {
		ctx, cancel = context.WithTimeout(c.ctx, o.timeout)
	}
	defer cancel()
	d := newDisplay(c.stderr, isTerminal(c.stderr), c.env("COLUMNS"))
	defer d.close()
	tr := newTracker(d, id)
	if o.progress {
		d.live(tr.liveLine)
	}

	ended := make(chan struct{})
	tailDone := make(chan error, 1)
	tailCtx, stopTail := context.WithCancel(ctx)
	defer stopTail()
	var tail *tailer
	if o.logs {
		tail = newTailer(cl, id, "", func(l logJSON, _ json.RawMessage) { d.line(l.prefix() + " " + l.Message) })
		go func() { tailDone <- tail.until(tailCtx, ended) }()
	} else {
		tailDone <- nil
	}

	var (
		r       runJSON // the latest snapshot
		raw     []byte
		version string
		err     error
	)
	for {
		start := time.Now()
		next, nextRaw, perr := c.pollRun(ctx, cl, id, version, d)
		if perr != nil {
			err = perr
			break
		}
		r, raw = next, nextRaw
		if o.progress && (r.Version != version || version == "") {
			steps, _, serr := c.listSteps(ctx, cl, id, nil)
			switch {
			case serr == nil:
				tr.observe(r, steps)
				version = r.Version
			case ctx.Err() != nil:
				err = ctx.Err()
			case !transient(serr):
				err = fmt.Errorf("list steps of run %s: %w", id, serr)
			}
			// A transient failure leaves version as it was: the next
			// poll answers at once, and the steps are read again.
		} else {
			version = r.Version
		}
		if err != nil || r.terminal() {
			break
		}
		if sleep(ctx, minPollGap-time.Since(start)) != nil {
			err = ctx.Err()
			break
		}
	}
	if err != nil {
		stopTail()
		<-tailDone
		if errors.Is(err, context.DeadlineExceeded) && c.ctx.Err() == nil && o.timeout > 0 {
			status := "status unknown"
			if r.Status != "" {
				status = "still " + string(r.Status)
			}
			d.close()
			return r, raw, &timeoutError{runID: id, timeout: o.timeout, status: status}
		}
		if c.ctx.Err() != nil {
			return r, raw, c.ctx.Err()
		}
		return r, raw, err
	}
	if tail != nil && r.Status == "cancelled" {
		tail.settle = cancelSettle
	}
	close(ended)
	if terr := <-tailDone; terr != nil && c.ctx.Err() == nil {
		d.line(fmt.Sprintf("maxq: could not read every log line: %v", terr))
	}
	d.close()
	return r, raw, nil
}

// report ends a followed run: a last line on stderr and the exit code. (The
// steps that failed were shown as they did.)
func (c *cli) report(r runJSON) error {
	dur := ""
	if r.DurationMs != nil {
		dur = " in " + formatDuration(time.Duration(*r.DurationMs)*time.Millisecond)
	}
	if r.Status == "completed" {
		fmt.Fprintf(c.stderr, "run %s completed%s\n", r.ID, dur)
		return nil
	}
	msg := fmt.Sprintf("run %s %s%s", r.ID, r.Status, dur)
	if e := errorSummary(r.Error); e != "" {
		msg += ": " + e
	}
	return &exitError{code: exitRunFailed, msg: msg}
}

// tailer reads a run's log lines after a cursor and hands each line to emit
// exactly once. The API hands lines out in commit order and never lets one
// appear behind a cursor it gave, so following "next" is enough.
type tailer struct {
	cl     *client
	runID  string
	stepID string // "": every line of the run
	emit   func(logJSON, json.RawMessage)
	keep   func(logJSON) bool // nil: every line
	// settle is how long to wait before the last read; set it before
	// closing the ended channel given to until.
	settle time.Duration

	cursor string // the API's cursor after the last line handed over
}

func newTailer(cl *client, runID, stepID string, emit func(logJSON, json.RawMessage)) *tailer {
	return &tailer{cl: cl, runID: runID, stepID: stepID, emit: emit}
}

// poll hands over every new line that is visible now.
func (t *tailer) poll(ctx context.Context) error {
	for {
		q := url.Values{"limit": {strconv.Itoa(logPage)}}
		if t.cursor != "" {
			q.Set("after", t.cursor)
		}
		if t.stepID != "" {
			q.Set("stepId", t.stepID)
		}
		var page struct {
			Logs []json.RawMessage `json:"logs"`
			Next string            `json:"next"`
		}
		if _, err := t.cl.getJSON(ctx, "/runs/"+pathEscape(t.runID)+"/logs", q, &page); err != nil {
			return fmt.Errorf("read logs of run %s: %w", t.runID, err)
		}
		for _, raw := range page.Logs {
			var l logJSON
			if err := json.Unmarshal(raw, &l); err != nil {
				return fmt.Errorf("read logs of run %s: unexpected line: %w", t.runID, err)
			}
			if t.keep == nil || t.keep(l) {
				t.emit(l, raw)
			}
		}
		t.cursor = page.Next
		if len(page.Logs) < logPage {
			return nil
		}
	}
}

// until polls until ended is closed, then once more, so that every line
// written before the run ended is handed over.
func (t *tailer) until(ctx context.Context, ended <-chan struct{}) error {
	var outage time.Time
	for {
		select {
		case <-ended:
			// Every script's output is written before its result, so
			// after the run ended one more read finds every line. A
			// cancelled run's scripts are still being stopped: give
			// their last lines a moment.
			if t.settle > 0 && sleep(ctx, t.settle) != nil {
				return nil
			}
			return t.poll(ctx)
		default:
		}
		if err := t.poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !transient(err) {
				return err
			}
			if outage.IsZero() {
				outage = time.Now()
			}
			if time.Since(outage) > outageBudget {
				return err
			}
		} else {
			outage = time.Time{}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ended:
		case <-time.After(tailEvery):
		}
	}
}
