// Package flow discovers flows and their steps under FLOWS_ROOT:
//
//	FLOWS_ROOT/{flow}/flow.sh
//	FLOWS_ROOT/{flow}/steps/{step}/step.sh
//
// Every call of a Catalog reads the filesystem afresh, so adding or fixing a
// flow needs no restart; a Cache, for a server that looks flows up on every
// request, remembers what it found for a second. A directory without flow.sh (say a lib/ of shared shell helpers)
// and any hidden entry are simply not flows; a directory that does look like
// a flow or a step but cannot be used is reported as a Problem.
package flow

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/maxq-dev/maxq/internal/core"
)

const (
	flowScript = "flow.sh"
	stepsDir   = "steps"
	stepScript = "step.sh"
)

// Catalog reads flows from a FLOWS_ROOT directory.
type Catalog struct{ Root string }

// Flow is a usable flow: a directory with an executable flow.sh.
type Flow struct {
	Name  string   // directory name
	Path  string   // absolute path of the flow directory
	Steps []string // sorted names of valid steps
}

// Problem is something wrong under FLOWS_ROOT that makes a flow or step unusable.
type Problem struct {
	Path    string // absolute path of the offending file or directory
	Flow    string
	Step    string // empty for flow-level problems
	Message string // e.g. "flow.sh is not executable", "invalid step name"
}

// List returns the usable flows sorted by name and every problem found on the
// way. It fails only when Root cannot be read as a directory.
func (c Catalog) List() ([]Flow, []Problem, error) {
	if c.Root == "" {
		return nil, nil, errors.New("read flows root: no directory configured")
	}
	root := c.root()
	entries, err := os.ReadDir(root) // sorted by name
	if err != nil {
		return nil, nil, fmt.Errorf("read flows root: %w", err)
	}
	flows := []Flow{}
	var problems []Problem
	for _, e := range entries {
		f, found, ok := load(root, e.Name())
		problems = append(problems, found...)
		if ok {
			flows = append(flows, f)
		}
	}
	return flows, problems, nil
}

// Validate is the startup check: Root must be a readable directory, and every
// problem under it is returned so that it can be logged.
func (c Catalog) Validate() ([]Problem, error) {
	_, problems, err := c.List()
	return problems, err
}

// Flow returns the named flow, reading only its own directory. An invalid
// name wraps core.ErrInvalid; a missing or unusable flow wraps core.ErrNotFound.
func (c Catalog) Flow(name string) (Flow, error) {
	return c.flow(name, load)
}

// Check returns the error Flow would for the named flow, or nil, reading
// only the flow's directory and flow.sh and none of its steps: what a
// worker checks before it calls flow.sh, in a few system calls however
// many steps the flow has.
func (c Catalog) Check(name string) error {
	_, err := c.flow(name, loadFlow)
	return err
}

// flow is Flow with the loader given: load, or loadFlow for no steps.
func (c Catalog) flow(name string, loader func(root, name string) (Flow, []Problem, bool)) (Flow, error) {
	if !core.ValidName(name) {
		return Flow{}, fmt.Errorf("flow %q: %w name", name, core.ErrInvalid)
	}
	f, problems, ok := loader(c.root(), name)
	switch {
	case ok:
		return f, nil
	case len(problems) > 0: // a flow-level problem is the only one reported
		return Flow{}, fmt.Errorf("flow %q %w: %s", name, core.ErrNotFound, problems[0].Message)
	default:
		return Flow{}, fmt.Errorf("flow %q %w", name, core.ErrNotFound)
	}
}

// FlowScript returns Root/name/flow.sh. Like StepDir and StepScript it only
// builds a path: validate names with core.ValidName (or Flow) first.
func (c Catalog) FlowScript(name string) string {
	return filepath.Join(c.root(), name, flowScript)
}

// StepDir returns Root/flow/steps/step, the working directory of a step.
func (c Catalog) StepDir(flow, step string) string {
	return filepath.Join(c.root(), flow, stepsDir, step)
}

// StepScript returns Root/flow/steps/step/step.sh.
func (c Catalog) StepScript(flow, step string) string {
	return filepath.Join(c.StepDir(flow, step), stepScript)
}

// root is Root made absolute, so that every reported path is too.
func (c Catalog) root() string {
	abs, err := filepath.Abs(c.Root)
	if err != nil { // only when the working directory is gone
		return filepath.Clean(c.Root)
	}
	return abs
}

// load reads the potential flow root/name. ok is false when it is not a flow
// at all (hidden, not a directory, no flow.sh) and when it is unusable; then
// the flow-level problem is the only one returned. A usable flow comes with
// the problems of its steps.
func load(root, name string) (f Flow, problems []Problem, ok bool) {
	f, problems, ok = loadFlow(root, name)
	if !ok {
		return f, problems, false
	}
	steps := filepath.Join(f.Path, stepsDir)
	entries, err := os.ReadDir(steps)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil, true // a flow may have no steps of its own
	}
	if err != nil {
		return f, []Problem{{Path: steps, Flow: name, Message: "cannot read steps: " + reason(err)}}, true
	}
	for _, e := range entries {
		step, stepDir := e.Name(), filepath.Join(steps, e.Name())
		if strings.HasPrefix(step, ".") || !isDir(stepDir) {
			continue
		}
		if !core.ValidName(step) {
			problems = append(problems, Problem{Path: stepDir, Flow: name, Step: step, Message: "invalid step name"})
			continue
		}
		script := filepath.Join(stepDir, stepScript)
		if msg := checkScript(script); msg != "" {
			problems = append(problems, Problem{Path: script, Flow: name, Step: step, Message: msg})
			continue
		}
		f.Steps = append(f.Steps, step)
	}
	return f, problems, true
}

// loadFlow is load without the steps: f.Steps is empty.
func loadFlow(root, name string) (f Flow, problems []Problem, ok bool) {
	dir := filepath.Join(root, name)
	if strings.HasPrefix(name, ".") || !isDir(dir) {
		return Flow{}, nil, false
	}
	script := filepath.Join(dir, flowScript)
	if _, err := os.Lstat(script); errors.Is(err, fs.ErrNotExist) {
		return Flow{}, nil, false
	}
	if !core.ValidName(name) {
		return Flow{}, []Problem{{Path: dir, Flow: name, Message: "invalid flow name"}}, false
	}
	if msg := checkScript(script); msg != "" {
		return Flow{}, []Problem{{Path: script, Flow: name, Message: msg}}, false
	}
	return Flow{Name: name, Path: dir, Steps: []string{}}, nil, true
}

// checkScript returns why the script at path cannot be run, or "" if it can:
// it must be a regular file (after symlinks) with an execute bit set.
func checkScript(path string) string {
	base := filepath.Base(path)
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return base + " is missing"
	case err != nil:
		return "cannot stat " + base + ": " + reason(err)
	case !fi.Mode().IsRegular():
		return base + " is not a regular file"
	case fi.Mode().Perm()&0o111 == 0:
		return base + " is not executable"
	}
	return ""
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// reason drops the path from err, which a Problem already carries.
func reason(err error) string {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
