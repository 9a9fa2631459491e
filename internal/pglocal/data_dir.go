package pglocal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// serverUser returns whom initdb and postgres run as: nil for ourselves,
// or OS user postgres when we are root, which both refuse to run as.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, so initdb and postgres must run as OS user postgres: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres: gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// prepareDir creates the data directory. When the server runs as another
// user, it gives a fresh data directory to that user, makes the parents it
// created searchable, and checks that the others are.
func prepareDir(dir string, cred *syscall.Credential) error {
	var created []string
	for d := filepath.Dir(dir); d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if cred == nil {
		return nil
	}
	for _, d := range created {
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		if !searchable(fi, cred) {
			return fmt.Errorf("data directory %s: user postgres cannot enter %s (chmod o+x it, or choose another directory)", dir, d)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	}
	return nil
}

// searchable reports whether cred may enter directory fi. The child runs
// with no supplementary groups, so only its primary group counts.
func searchable(fi fs.FileInfo, cred *syscall.Credential) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == cred.Uid:
		return perm&0o100 != 0
	case st.Gid == cred.Gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// initdb creates a cluster in dir whose superuser postgres is trusted on
// every local connection.
func initdb(ctx context.Context, bin, dir string, cred *syscall.Credential, fast bool) error {
	args := []string{"-D", dir, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-locale"}
	if fast {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), args...)
	cmd.Dir, cmd.Env = dir, childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w:\n%s", dir, err, lastLines(string(out), 20))
	}
	return nil
}

// stopLeftover stops a server still running on dir, left by a process that
// died without stopping it, and waits until it has gone.
func stopLeftover(ctx context.Context, dir string, logger *slog.Logger) error {
	pidFile := filepath.Join(dir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil // no server; postgres reports anything stranger
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 || pid == os.Getpid() || syscall.Kill(pid, 0) != nil {
		return nil // a stale file, which postgres removes itself
	}
	// The pid may belong to another program by now; Linux lets us check.
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) != "postgres" {
		return nil
	}
	logger.Warn("stopping leftover postgres", "dir", dir, "pid", pid)
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		return fmt.Errorf("stop leftover postgres (pid %d): %w", pid, err)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		// postgres removes postmaster.pid as it exits; checking the pid as
		// well covers an exit that left the file behind.
		if _, err := os.Stat(pidFile); errors.Is(err, fs.ErrNotExist) || syscall.Kill(pid, 0) != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stop leftover postgres (pid %d): %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// childEnv is the environment of initdb and postgres: an allow-list, so that
// PGDATA, PGPORT and the like cannot change what they do.
func childEnv() []string {
	env := []string{"PATH=" + os.Getenv("PATH")}
	if tz, ok := os.LookupEnv("TZ"); ok {
		env = append(env, "TZ="+tz)
	}
	return env
}

// logTail returns the last lines of the server log at path.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(b), 20)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
