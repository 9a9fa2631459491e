// Package cli is maxq, MaxQ's command-line client. It speaks only the HTTP
// API: it triggers and follows runs (with their logs) for people and CI
// jobs, reads runs, steps and artifacts, and — inside flow.sh and step.sh,
// where MaxQ sets MAXQ_API, MAXQ_RUN_ID and MAXQ_STEP_* — schedules stages,
// stores and reads artifacts and sets a step's output, so scripts need
// neither curl nor jq.
//
// Main is the whole program; cmd/maxq only calls it. It keeps no global
// state and never exits the process, so other binaries can run it too.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
)

// Exit codes.
const (
	exitOK          = 0
	exitRunFailed   = 1 // the run failed or was cancelled
	exitUsage       = 2 // bad usage, bad input, or an error from the API
	exitTimeout     = 3 // --timeout passed before the run ended
	exitInterrupted = 130
)

const defaultURL = "http://127.0.0.1:3000/api/v1"

// cli is one invocation of maxq.
type cli struct {
	ctx     context.Context
	env     func(string) string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	globals globals
}

// globals are the flags every command takes.
type globals struct {
	output string
	url    string
	token  string
}

func (g globals) check() error {
	switch g.output {
	case "", "text", "json":
		return nil
	}
	return usagef("--output must be text or json, not %q", g.output)
}

func (g globals) json() bool { return g.output == "json" }

// exitError ends maxq with code, after printing msg (if any) on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// usagef is a usage error (exit 2).
func usagef(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

// Main runs maxq with args (without the program name) and returns its exit
// code: 0 success, 1 the run failed or was cancelled, 2 bad usage or an API
// error, 3 --timeout passed.
func Main(ctx context.Context, args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if env == nil {
		env = func(string) string { return "" }
	}
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	c := &cli{ctx: ctx, env: env, stdin: stdin, stdout: stdout, stderr: stderr}
	err := c.main(args)
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		fmt.Fprintln(stderr, "maxq: interrupted")
		return exitInterrupted
	}
	code := exitUsage
	var xe *exitError
	if errors.As(err, &xe) {
		code = xe.code
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintln(stderr, "maxq: "+oneLine(msg))
	}
	return code
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), " ")
}

// main parses the global flags before the command and runs it.
func (c *cli) main(args []string) error {
	top := flag.NewFlagSet("maxq", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	top.Usage = func() {}
	top.StringVar(&c.globals.output, "output", "", "")
	top.StringVar(&c.globals.output, "o", "", "")
	top.StringVar(&c.globals.url, "url", "", "")
	top.StringVar(&c.globals.token, "token", "", "")
	var version bool
	top.BoolVar(&version, "version", false, "")
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printHelp(c.stdout)
			return errHelp
		}
		return usagef("%s (see maxq --help)", flagError(err))
	}
	if version {
		fmt.Fprintln(c.stdout, "maxq", buildVersion())
		return nil
	}
	args = top.Args()
	if len(args) == 0 {
		c.printHelp(c.stderr)
		return &exitError{code: exitUsage}
	}
	name, rest := args[0], args[1:]
	if name == "help" {
		if len(rest) == 0 {
			c.printHelp(c.stdout)
			return errHelp
		}
		name, rest = rest[0], append(rest[1:], "--help")
	}
	cmd, rest, err := lookup(name, rest)
	if err != nil {
		return err
	}
	return cmd.run(c, cmd, rest)
}

// lookup finds the command args name, taking a second word for the
// commands that have one (stage schedule, artifact put|get).
func lookup(name string, rest []string) (*command, []string, error) {
	if name == "artifact" && len(rest) > 0 && (rest[0] == "put" || rest[0] == "get") {
		name, rest = name+" "+rest[0], rest[1:]
	}
	if name == "stage" {
		if len(rest) > 0 && (rest[0] == "--help" || rest[0] == "-h") {
			rest = append([]string{"schedule"}, rest...)
		}
		if len(rest) == 0 || rest[0] != "schedule" {
			what := "nothing"
			if len(rest) > 0 {
				what = fmt.Sprintf("%q", rest[0])
			}
			return nil, nil, usagef("stage: unknown subcommand %s; did you mean 'maxq stage schedule'?", what)
		}
		name, rest = "stage schedule", rest[1:]
	}
	for i := range commands {
		if commands[i].name == name {
			return &commands[i], rest, nil
		}
	}
	return nil, nil, usagef("unknown command %q (see maxq --help)", name)
}

// printHelp is maxq --help: every command in one line, the environment and
// the exit codes.
func (c *cli) printHelp(w io.Writer) {
	fmt.Fprint(w, `maxq is the command-line client of MaxQ's HTTP API.

Usage: maxq [global flags] COMMAND [ARGS] [flags]

Commands:
`)
	section := ""
	for _, cmd := range commands {
		if cmd.section != section {
			section = cmd.section
			fmt.Fprintf(w, "\n  %s\n", section)
		}
		fmt.Fprintf(w, "    %-18s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintf(w, `
Global flags (before or after the command):
  -o, --output FORMAT   text (default) or json: the API's JSON, for jq
      --url URL         the API's base URL
      --token TOKEN     the bearer token
      --version         print maxq's version

Environment:
  MAXQ_URL              the API's base URL (default %s)
  MAXQ_API              the API's base URL inside scripts (MaxQ sets it); MAXQ_URL wins
  MAXQ_API_TOKEN        bearer token
  MAXQ_TOKEN            bearer token inside scripts (MaxQ sets it); MAXQ_API_TOKEN wins
  MAXQ_RUN_ID           default run of the commands that take one (set in scripts)
  MAXQ_STEP_ID, MAXQ_STEP_NAME, MAXQ_STEP_SEQUENCE
                        the step of 'artifact put' and 'output' (set in step.sh)
  Flags win over the environment: --url, --token, --run.

Exit codes:
  0  success (for run --wait and retry --wait: the run completed)
  1  the run failed or was cancelled (its error is printed on stderr)
  2  bad usage, bad input, or an error from the API
  3  --timeout passed before the run ended (the run keeps going)

Run 'maxq COMMAND --help' for a command's arguments and flags.
`, defaultURL)
}

// apiURL is the API's base URL: --url, else MAXQ_URL, else MAXQ_API (set
// in scripts), else the default.
func (c *cli) apiURL() string {
	return firstOf(c.globals.url, c.env("MAXQ_URL"), c.env("MAXQ_API"), defaultURL)
}

// checkURL rejects a base URL no request could be sent to.
func (c *cli) checkURL() error {
	base := c.apiURL()
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("the API URL %q must look like http://host:port/api/v1 (--url, MAXQ_URL, MAXQ_API)", base)
	}
	return nil
}

// client returns the API client from the flags and the environment: the
// token is --token, else MAXQ_API_TOKEN, else MAXQ_TOKEN (set in scripts).
func (c *cli) client() *client {
	token := firstOf(c.globals.token, c.env("MAXQ_API_TOKEN"), c.env("MAXQ_TOKEN"))
	return newClient(c.apiURL(), token)
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// runArg returns the run an operand names, or MAXQ_RUN_ID.
func (c *cli) runArg(fs *flagSet, ops []string) (string, error) {
	if len(ops) > 0 {
		if len(ops) > 1 {
			return "", usagef("%s: unexpected argument %q (usage: maxq %s %s)", fs.cmd.name, ops[1], fs.cmd.name, fs.cmd.args)
		}
		return ops[0], nil
	}
	if id := c.env("MAXQ_RUN_ID"); id != "" {
		return id, nil
	}
	return "", usagef("%s: missing RUN (or set MAXQ_RUN_ID) (usage: maxq %s %s)", fs.cmd.name, fs.cmd.name, fs.cmd.args)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
