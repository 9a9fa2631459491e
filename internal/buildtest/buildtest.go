// Package buildtest builds the project's commands for tests that run them
// as real processes: each command once per test process, into a temporary
// directory. pgtest.Main exits the process, so that directory cannot be
// removed when the tests end; each first build sweeps the directories of
// test processes that are gone.
package buildtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// dirPattern names the directories binaries are built into, one per test
// process: maxq-buildtest-<pid>-<random>.
const dirPattern = "maxq-buildtest-"

var (
	mu    sync.Mutex
	dir   string
	built = map[string]string{} // package → binary
)

// Binary builds the command package pkg (relative to the module root, e.g.
// "./cmd/worker") once per test process and returns the binary's path,
// named after the package's last element unless name is given.
func Binary(t testing.TB, pkg string, name ...string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if bin, ok := built[pkg]; ok {
		return bin
	}
	bin, err := build(pkg, name)
	if err != nil {
		t.Fatalf("buildtest: %v", err)
	}
	built[pkg] = bin
	return bin
}

func build(pkg string, name []string) (string, error) {
	if dir == "" {
		sweep()
		d, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPattern, os.Getpid()))
		if err != nil {
			return "", err
		}
		dir = d
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("find the go command: %w", err)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Base(pkg)
	if len(name) > 0 {
		out = name[0]
	}
	bin := filepath.Join(dir, out)
	cmd := exec.Command(goBin, "build", "-o", bin, pkg)
	cmd.Dir = root
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, output)
	}
	return bin, nil
}

// moduleRoot is the directory holding go.mod, above the working directory.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		d = parent
	}
}

// sweep removes the binary directories of test processes that no longer run.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern+"*"))
	for _, d := range dirs {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), dirPattern), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		_ = os.RemoveAll(d)
	}
}
