package deploy

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/flow"
)

// samMake runs `make build-<function>` in the repository root as `sam build`
// does: the caller's environment plus ARTIFACTS_DIR, here with the make
// variables given in vars (ARCH, FLOWS_DIR) and no others inherited.
func samMake(t *testing.T, function, artifactsDir string, vars ...string) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "ARCH", "FLOWS_DIR", "ARTIFACTS_DIR", "MAKEFLAGS", "MAKELEVEL", "MFLAGS":
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "ARTIFACTS_DIR="+artifactsDir)
	env = append(env, vars...)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "build-"+function)
	cmd.Dir = repoRoot(t)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make build-%s:\n%s", function, out)
}

// requireBootstrap checks a package's bootstrap: a static, stripped Linux
// executable of cmd/<command> for machine, built as the Makefile promises.
func requireBootstrap(t *testing.T, path string, machine elf.Machine, goarch, command string) {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o111), fi.Mode().Perm()&0o111, "bootstrap is executable")

	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, elf.ELFOSABI_NONE, f.OSABI)
	require.Equal(t, machine, f.Machine)
	require.Equal(t, elf.ET_EXEC, f.Type, "a position-dependent executable")
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "static: no program interpreter")
		require.NotEqual(t, elf.PT_DYNAMIC, p.Type, "static: no dynamic section")
	}
	require.Nil(t, f.Section(".symtab"), "stripped (-ldflags=-s)")
	require.Nil(t, f.Section(".debug_info"), "no DWARF (-ldflags=-w)")

	info, err := buildinfo.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "github.com/maxq-dev/maxq/cmd/"+command, info.Path)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// With -trimpath Go leaves -ldflags out; the sections above show -s -w.
	for k, v := range map[string]string{
		"GOOS": "linux", "GOARCH": goarch, "CGO_ENABLED": "0", "-tags": "lambda.norpc", "-trimpath": "true",
	} {
		require.Equal(t, v, settings[k], "build setting %s", k)
	}
}

// requireSameTree checks that dst holds every file of src with the same
// content and permission bits, symlinks replaced by what they point to.
func requireSameTree(t *testing.T, src, dst string) {
	t.Helper()
	files := 0
	require.NoError(t, filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, err := filepath.Rel(src, path)
		require.NoError(t, err)
		want, err := os.Stat(path) // follows symlinks
		require.NoError(t, err)
		got, err := os.Lstat(filepath.Join(dst, rel))
		require.NoError(t, err, "the package has %s", rel)
		if want.IsDir() {
			require.True(t, got.IsDir(), "%s is a directory", rel)
			return nil
		}
		files++
		require.True(t, got.Mode().IsRegular(), "%s is a regular file in the package, not %v", rel, got.Mode().Type())
		require.Equal(t, want.Mode().Perm(), got.Mode().Perm(), "%s keeps its permissions", rel)
		wantData, err := os.ReadFile(path)
		require.NoError(t, err)
		gotData, err := os.ReadFile(filepath.Join(dst, rel))
		require.NoError(t, err)
		require.True(t, bytes.Equal(wantData, gotData), "%s has the same content", rel)
		return nil
	}))
	require.NotZero(t, files)
}

// requireSameFlows checks that the packaged FLOWS_ROOT offers the same flows
// and steps as the source, with no new problem.
func requireSameFlows(t *testing.T, src, dst string) {
	t.Helper()
	wantFlows, wantProblems, err := flow.Catalog{Root: src}.List()
	require.NoError(t, err)
	gotFlows, gotProblems, err := flow.Catalog{Root: dst}.List()
	require.NoError(t, err)
	require.Len(t, gotProblems, len(wantProblems), "problems: %v", gotProblems)
	require.Len(t, gotFlows, len(wantFlows))
	for i, f := range gotFlows {
		require.Equal(t, wantFlows[i].Name, f.Name)
		require.Equal(t, wantFlows[i].Steps, f.Steps, "steps of %s", f.Name)
	}
}

func TestLambdaPackages(t *testing.T) {
	t.Parallel()

	t.Run("WorkerFunction", func(t *testing.T) {
		t.Parallel()
		// The default flows (examples/), for x86_64 (Lambda's name for amd64).
		pkg := t.TempDir()
		samMake(t, "WorkerFunction", pkg, "ARCH=x86_64")
		requireBootstrap(t, filepath.Join(pkg, "bootstrap"), elf.EM_X86_64, "amd64", "worker")

		examples := filepath.Join(repoRoot(t), "examples")
		flows := filepath.Join(pkg, "flows")
		requireSameTree(t, examples, flows)
		requireSameFlows(t, examples, flows)
		for _, script := range []string{"flow.sh", "steps/greet/step.sh", "steps/goodbye/step.sh"} {
			fi, err := os.Stat(filepath.Join(flows, "hello_world", script))
			require.NoError(t, err)
			require.Equal(t, fs.FileMode(0o111), fi.Mode().Perm()&0o111, "hello_world/%s is executable", script)
		}
		hello, err := flow.Catalog{Root: flows}.Flow("hello_world")
		require.NoError(t, err)
		require.Equal(t, []string{"goodbye", "greet"}, hello.Steps)

		// The package holds the function and its flows, nothing else.
		entries, err := os.ReadDir(pkg)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		require.Equal(t, []string{"bootstrap", "flows"}, names)
	})

	t.Run("ApiFunction", func(t *testing.T) {
		t.Parallel()
		// The default architecture (arm64), and FLOWS_DIR elsewhere, with a
		// symlinked step, a helper library and a data file.
		src := t.TempDir()
		write := func(rel, body string, mode fs.FileMode) {
			path := filepath.Join(src, rel)
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(body), mode))
		}
		write("etl/flow.sh", "#!/bin/sh\nexit 0\n", 0o755)
		write("etl/steps/extract/step.sh", "#!/bin/sh\necho extract\n", 0o750)
		write("etl/fixtures/rows.csv", "a,b\n", 0o640)
		write("lib/helpers.sh", "# sourced, not run\n", 0o644)
		shared := filepath.Join(t.TempDir(), "load.sh")
		require.NoError(t, os.WriteFile(shared, []byte("#!/bin/sh\necho load\n"), 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(src, "etl", "steps", "load"), 0o755))
		require.NoError(t, os.Symlink(shared, filepath.Join(src, "etl", "steps", "load", "step.sh")))

		pkg := t.TempDir()
		samMake(t, "ApiFunction", pkg, "FLOWS_DIR="+src)
		requireBootstrap(t, filepath.Join(pkg, "bootstrap"), elf.EM_AARCH64, "arm64", "api")
		requireSameTree(t, src, filepath.Join(pkg, "flows"))
		requireSameFlows(t, src, filepath.Join(pkg, "flows"))
		etl, err := flow.Catalog{Root: filepath.Join(pkg, "flows")}.Flow("etl")
		require.NoError(t, err)
		require.Equal(t, []string{"extract", "load"}, etl.Steps)
	})
}
