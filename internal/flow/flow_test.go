package flow_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/flow"
)

// build makes a FLOWS_ROOT in a temp dir. Keys are slash-separated paths; a
// trailing slash makes an empty directory, otherwise a script with the mode.
func build(t testing.TB, tree map[string]os.FileMode) string {
	t.Helper()
	root := t.TempDir()
	for path, mode := range tree {
		add(t, root, path, mode)
	}
	return root
}

func add(t testing.TB, root, path string, mode os.FileMode) {
	t.Helper()
	full := filepath.Join(root, filepath.FromSlash(path))
	if strings.HasSuffix(path, "/") {
		require.NoError(t, os.MkdirAll(full, 0o755))
		return
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(t, os.WriteFile(full, []byte("#!/bin/sh\n"), mode))
	require.NoError(t, os.Chmod(full, mode)) // WriteFile's mode is subject to umask
}

// relProblems makes problem paths relative to root so tables can spell them.
func relProblems(t *testing.T, root string, problems []flow.Problem) []flow.Problem {
	t.Helper()
	out := []flow.Problem{}
	for _, p := range problems {
		rel, err := filepath.Rel(root, p.Path)
		require.NoError(t, err)
		p.Path = filepath.ToSlash(rel)
		out = append(out, p)
	}
	return out
}

func TestCatalogList(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name         string
		tree         map[string]os.FileMode
		wantFlows    map[string][]string
		wantProblems []flow.Problem
	}{
		{
			name: "ValidFlowsWithSteps",
			tree: map[string]os.FileMode{
				"market/flow.sh":               0o755,
				"market/steps/fetch/step.sh":   0o755,
				"market/steps/report/step.sh":  0o700,
				"market/steps/a.b-c_1/step.sh": 0o755,
				"market/steps/README.md":       0o644,
				"plain/flow.sh":                0o755,
			},
			wantFlows: map[string][]string{
				"market": {"a.b-c_1", "fetch", "report"},
				"plain":  {},
			},
			wantProblems: []flow.Problem{},
		},
		{
			name: "NonExecutableScripts",
			tree: map[string]os.FileMode{
				"noexec/flow.sh":          0o644,
				"noexec/steps/s/step.sh":  0o755,
				"ok/flow.sh":              0o755,
				"ok/steps/good/step.sh":   0o755,
				"ok/steps/noexec/step.sh": 0o644,
				"ok/steps/nostep/":        0,
				"ok/steps/isdir/step.sh/": 0,
				"flowdir/flow.sh/":        0,
			},
			wantFlows: map[string][]string{"ok": {"good"}},
			wantProblems: []flow.Problem{
				{Path: "flowdir/flow.sh", Flow: "flowdir", Message: "flow.sh is not a regular file"},
				{Path: "noexec/flow.sh", Flow: "noexec", Message: "flow.sh is not executable"},
				{Path: "ok/steps/isdir/step.sh", Flow: "ok", Step: "isdir", Message: "step.sh is not a regular file"},
				{Path: "ok/steps/noexec/step.sh", Flow: "ok", Step: "noexec", Message: "step.sh is not executable"},
				{Path: "ok/steps/nostep/step.sh", Flow: "ok", Step: "nostep", Message: "step.sh is missing"},
			},
		},
		{
			name: "BadNames",
			tree: map[string]os.FileMode{
				"bad name/flow.sh":            0o755,
				"-x/flow.sh":                  0o755,
				".hidden/flow.sh":             0o755,
				"good/flow.sh":                0o755,
				"good/steps/bad step/step.sh": 0o755,
				"good/steps/-s/step.sh":       0o755,
				"good/steps/.git/step.sh":     0o755,
				"good/steps/ok/step.sh":       0o755,
			},
			wantFlows: map[string][]string{"good": {"ok"}},
			wantProblems: []flow.Problem{
				{Path: "-x", Flow: "-x", Message: "invalid flow name"},
				{Path: "bad name", Flow: "bad name", Message: "invalid flow name"},
				{Path: "good/steps/-s", Flow: "good", Step: "-s", Message: "invalid step name"},
				{Path: "good/steps/bad step", Flow: "good", Step: "bad step", Message: "invalid step name"},
			},
		},
		{
			name: "DirectoriesWithoutFlowScriptIgnored",
			tree: map[string]os.FileMode{
				"lib/common.sh":       0o644,
				"lib/steps/x/step.sh": 0o644,
				"ci/":                 0,
				"bad name/":           0,
				"README.md":           0o644,
				"flow.sh":             0o755,
				"real/flow.sh":        0o755,
			},
			wantFlows:    map[string][]string{"real": {}},
			wantProblems: []flow.Problem{},
		},
		{
			name:         "EmptyRoot",
			tree:         map[string]os.FileMode{},
			wantFlows:    map[string][]string{},
			wantProblems: []flow.Problem{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := build(t, tt.tree)

			flows, problems, err := flow.Catalog{Root: root}.List()
			require.NoError(t, err)

			got := map[string][]string{}
			var names []string
			for _, f := range flows {
				got[f.Name] = f.Steps
				names = append(names, f.Name)
				require.Equal(t, filepath.Join(root, f.Name), f.Path)
			}
			require.Equal(t, tt.wantFlows, got)
			require.IsNonDecreasing(t, names)
			require.Equal(t, tt.wantProblems, relProblems(t, root, problems))

			validated, err := flow.Catalog{Root: root}.Validate()
			require.NoError(t, err)
			require.Equal(t, problems, validated)
		})
	}
}

func TestCatalogListSymlinks(t *testing.T) {
	t.Parallel()

	root := build(t, map[string]os.FileMode{
		"lib/run.sh":            0o755,
		"lib/plain.txt":         0o644,
		"real/flow.sh":          0o755,
		"real/steps/linked/":    0,
		"real/steps/linkedtxt/": 0,
		"real/steps/dangling/":  0,
	})
	link := func(target, name string) {
		require.NoError(t, os.Symlink(target, filepath.Join(root, filepath.FromSlash(name))))
	}
	link("../../../lib/run.sh", "real/steps/linked/step.sh")
	link("../../../lib/plain.txt", "real/steps/linkedtxt/step.sh")
	link("nowhere", "real/steps/dangling/step.sh")
	link("real", "alias") // a symlinked flow directory is a flow too

	flows, problems, err := flow.Catalog{Root: root}.List()
	require.NoError(t, err)
	require.Equal(t, []flow.Flow{
		{Name: "alias", Path: filepath.Join(root, "alias"), Steps: []string{"linked"}},
		{Name: "real", Path: filepath.Join(root, "real"), Steps: []string{"linked"}},
	}, flows)
	require.Equal(t, []flow.Problem{
		{Path: "alias/steps/dangling/step.sh", Flow: "alias", Step: "dangling", Message: "step.sh is missing"},
		{Path: "alias/steps/linkedtxt/step.sh", Flow: "alias", Step: "linkedtxt", Message: "step.sh is not executable"},
		{Path: "real/steps/dangling/step.sh", Flow: "real", Step: "dangling", Message: "step.sh is missing"},
		{Path: "real/steps/linkedtxt/step.sh", Flow: "real", Step: "linkedtxt", Message: "step.sh is not executable"},
	}, relProblems(t, root, problems))
}

func TestCatalogRootErrors(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))

	tests := []struct {
		name string
		root string
	}{
		{name: "Missing", root: filepath.Join(dir, "missing")},
		{name: "NotADirectory", root: file},
		{name: "Unset", root: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := flow.Catalog{Root: tt.root}

			flows, problems, err := c.List()
			require.ErrorContains(t, err, "read flows root")
			require.Nil(t, flows)
			require.Nil(t, problems)

			_, err = c.Validate()
			require.ErrorContains(t, err, "read flows root")
		})
	}
}

func TestCatalogRelativeRoot(t *testing.T) {
	t.Parallel()

	root := build(t, map[string]os.FileMode{"a/flow.sh": 0o755})
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, root)
	require.NoError(t, err)
	c := flow.Catalog{Root: rel}

	flows, _, err := c.List()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	require.Equal(t, filepath.Join(root, "a"), flows[0].Path)

	f, err := c.Flow("a")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "a"), f.Path)
	require.Equal(t, filepath.Join(root, "a", "flow.sh"), c.FlowScript("a"))
}

func TestCatalogFlow(t *testing.T) {
	t.Parallel()

	root := build(t, map[string]os.FileMode{
		"a/flow.sh":              0o755,
		"a/steps/one/step.sh":    0o755,
		"a/steps/broken/step.sh": 0o644,
		"noexec/flow.sh":         0o644,
		"lib/helpers.sh":         0o755,
		".hidden/flow.sh":        0o755,
	})
	c := flow.Catalog{Root: root}

	f, err := c.Flow("a")
	require.NoError(t, err)
	require.Equal(t, flow.Flow{Name: "a", Path: filepath.Join(root, "a"), Steps: []string{"one"}}, f)
	require.NoError(t, c.Check("a"))

	tests := []struct {
		name    string
		flow    string
		wantErr error
		wantMsg string
	}{
		{name: "ParentEscape", flow: "../etc", wantErr: core.ErrInvalid, wantMsg: `flow "../etc": invalid name`},
		{name: "Slash", flow: "a/steps", wantErr: core.ErrInvalid},
		{name: "Hidden", flow: ".hidden", wantErr: core.ErrInvalid},
		{name: "Empty", flow: "", wantErr: core.ErrInvalid},
		{name: "LeadingDash", flow: "-x", wantErr: core.ErrInvalid},
		{name: "TooLong", flow: strings.Repeat("a", core.MaxNameLength+1), wantErr: core.ErrInvalid},
		{name: "Missing", flow: "missing", wantErr: core.ErrNotFound, wantMsg: `flow "missing" not found`},
		{name: "NoFlowScript", flow: "lib", wantErr: core.ErrNotFound, wantMsg: `flow "lib" not found`},
		{name: "NotExecutable", flow: "noexec", wantErr: core.ErrNotFound, wantMsg: `flow "noexec" not found: flow.sh is not executable`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := c.Flow(tt.flow)
			require.ErrorIs(t, err, tt.wantErr)
			if tt.wantMsg != "" {
				require.EqualError(t, err, tt.wantMsg)
			}
			// Check, which reads no step, says the same.
			require.EqualError(t, c.Check(tt.flow), err.Error())
		})
	}
}

func TestCatalogNoCaching(t *testing.T) {
	t.Parallel()

	root := build(t, map[string]os.FileMode{"first/flow.sh": 0o755})
	c := flow.Catalog{Root: root}

	flows, _, err := c.List()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	_, err = c.Flow("second")
	require.ErrorIs(t, err, core.ErrNotFound)

	add(t, root, "second/flow.sh", 0o755)
	add(t, root, "second/steps/s/step.sh", 0o755)
	add(t, root, "first/steps/late/step.sh", 0o755)

	flows, _, err = c.List()
	require.NoError(t, err)
	require.Equal(t, []flow.Flow{
		{Name: "first", Path: filepath.Join(root, "first"), Steps: []string{"late"}},
		{Name: "second", Path: filepath.Join(root, "second"), Steps: []string{"s"}},
	}, flows)
	f, err := c.Flow("second")
	require.NoError(t, err)
	require.Equal(t, []string{"s"}, f.Steps)
}

func TestCatalogPaths(t *testing.T) {
	t.Parallel()

	c := flow.Catalog{Root: "/srv/flows/"}
	require.Equal(t, "/srv/flows/etl/flow.sh", c.FlowScript("etl"))
	require.Equal(t, "/srv/flows/etl/steps/load", c.StepDir("etl", "load"))
	require.Equal(t, "/srv/flows/etl/steps/load/step.sh", c.StepScript("etl", "load"))
}

// BenchmarkCatalogCheck compares the check a worker makes before each call
// of flow.sh with reading the whole flow, for a flow of 200 steps.
func BenchmarkCatalogCheck(b *testing.B) {
	tree := map[string]os.FileMode{"big/flow.sh": 0o755}
	for i := range 200 {
		tree[fmt.Sprintf("big/steps/s%03d/step.sh", i)] = 0o755
	}
	c := flow.Catalog{Root: build(b, tree)}
	b.Run("Check", func(b *testing.B) {
		for b.Loop() {
			if err := c.Check("big"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Flow", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Flow("big"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
