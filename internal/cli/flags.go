package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// errHelp says --help was asked for and answered.
var errHelp = errors.New("help shown")

// flagSet is a command's flags: its own, and the global ones bound to the
// invocation's globals, so they may come before or after the command.
type flagSet struct {
	*flag.FlagSet
	cmd  *command
	c    *cli
	own  []string // names of the command's own flags, in definition order
	glob map[string]bool
}

// newFlags starts the flag set of cmd, with the global flags bound.
func (c *cli) newFlags(cmd *command) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("maxq "+cmd.name, flag.ContinueOnError), cmd: cmd, c: c, glob: map[string]bool{}}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.addGlobals(&c.globals)
	return fs
}

// addGlobals binds the global flags to g, keeping what g already holds.
func (fs *flagSet) addGlobals(g *globals) {
	fs.StringVar(&g.output, "output", g.output, "output `FORMAT`: text or json")
	fs.StringVar(&g.output, "o", g.output, "short for --output")
	fs.StringVar(&g.url, "url", g.url, "API base `URL` (default $MAXQ_URL, else $MAXQ_API, else "+defaultURL+")")
	fs.StringVar(&g.token, "token", g.token, "bearer `TOKEN` (default $MAXQ_API_TOKEN, else $MAXQ_TOKEN)")
	for _, n := range []string{"output", "o", "url", "token"} {
		fs.glob[n] = true
	}
}

func (fs *flagSet) note(name string) {
	fs.own = append(fs.own, name)
}

func (fs *flagSet) str(p *string, name, def, usage string) {
	fs.StringVar(p, name, def, usage)
	fs.note(name)
}

func (fs *flagSet) boolean(p *bool, name, usage string) {
	fs.BoolVar(p, name, false, usage)
	fs.note(name)
}

func (fs *flagSet) integer(p *int, name string, def int, usage string) {
	fs.IntVar(p, name, def, usage)
	fs.note(name)
}

func (fs *flagSet) list(p *[]string, name, usage string) {
	fs.Var((*stringList)(p), name, usage)
	fs.note(name)
}

func (fs *flagSet) duration(p *time.Duration, name, usage string) {
	fs.Var((*durationValue)(p), name, usage)
	fs.note(name)
}

// parse parses args, flags and operands in any order ("--" ends the
// flags), and returns the operands. --help prints the command's help on
// stdout and returns errHelp.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var operands []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.printHelp(fs.c.stdout)
			return nil, errHelp
		}
		if err != nil {
			return nil, usagef("%s: %s", fs.cmd.name, flagError(err))
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			operands = append(operands, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
	if err := fs.c.globals.check(); err != nil {
		return nil, err
	}
	if err := fs.c.checkURL(); err != nil {
		return nil, err
	}
	return operands, nil
}

// flagError rewords the flag package's errors for a user typing --flags.
func flagError(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + strings.TrimLeft(name, "-")
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "flag --" + strings.TrimLeft(name, "-") + " needs a value"
	}
	return strings.ReplaceAll(msg, "flag -", "flag --")
}

// operands checks the number of operands: at least min, at most max (-1:
// any number).
func (fs *flagSet) operands(ops []string, minN, maxN int) error {
	if len(ops) < minN {
		return usagef("%s: missing %s (usage: maxq %s %s)", fs.cmd.name, missingName(fs.cmd.args, len(ops)), fs.cmd.name, fs.cmd.args)
	}
	if maxN >= 0 && len(ops) > maxN {
		return usagef("%s: unexpected argument %q (usage: maxq %s %s)", fs.cmd.name, ops[maxN], fs.cmd.name, fs.cmd.args)
	}
	return nil
}

// missingName names operand i of synopsis, e.g. "RUN".
func missingName(synopsis string, i int) string {
	var names []string
	for _, w := range strings.Fields(synopsis) {
		if !strings.HasPrefix(w, "[") && !strings.HasPrefix(w, "-") && strings.ToUpper(w) == w {
			names = append(names, strings.Trim(w, "|"))
		}
	}
	if i < len(names) {
		return names[i]
	}
	return "an argument"
}

// printHelp writes the command's usage, description and every flag.
func (fs *flagSet) printHelp(w io.Writer) {
	cmd := fs.cmd
	fmt.Fprintf(w, "Usage: maxq %s %s\n\n%s\n", cmd.name, cmd.args, strings.TrimSpace(cmd.summary))
	if cmd.details != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(cmd.details, "\n"))
	}
	if len(fs.own) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		for _, name := range fs.own {
			fs.printFlag(w, name, "")
		}
	}
	fmt.Fprintln(w, "\nGlobal flags:")
	fs.printFlag(w, "output", "-o, ")
	fs.printFlag(w, "url", "")
	fs.printFlag(w, "token", "")
	fmt.Fprintln(w, "\nRun 'maxq --help' for the environment variables and exit codes.")
}

func (fs *flagSet) printFlag(w io.Writer, name, short string) {
	f := fs.Lookup(name)
	arg, usage := flag.UnquoteUsage(f)
	if _, isList := f.Value.(*stringList); isList {
		usage += " (repeatable)"
	}
	head := "--" + name
	if arg != "" {
		head += " " + arg
	}
	fmt.Fprintf(w, "  %-30s %s\n", short+head, usage)
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// durationValue is a flag taking a Go duration ("90s", "30m", "1h30m") or
// a number of seconds.
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }
func (d *durationValue) Set(v string) error {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n <= 0 {
			return errors.New("must be more than 0")
		}
		*d = durationValue(time.Duration(n * float64(time.Second)))
		return nil
	}
	x, err := time.ParseDuration(v)
	if err != nil || x <= 0 {
		return errors.New(`want a duration such as 90s, 30m or 1h30m`)
	}
	*d = durationValue(x)
	return nil
}
