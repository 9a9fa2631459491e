package pglocal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// logName is the server log, in the data directory.
	logName = "server.log"
	// startTimeout bounds how long Start and Restart wait for connections.
	startTimeout = 30 * time.Second
)

// Options configure Start.
type Options struct {
	// Dir is the data directory. Start creates it and runs initdb when it
	// holds no PG_VERSION.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Fast turns durability off (fsync, synchronous_commit,
	// full_page_writes): for tests, never for data worth keeping.
	Fast bool
	// Logger reports initdb, starts and stops; nil discards.
	Logger *slog.Logger
	// Settings are extra server settings, passed as -c name=value. They win
	// over pglocal's own.
	Settings map[string]string
}

// Cluster is a PostgreSQL server running as a child of this process.
type Cluster struct {
	bin, dir string
	port     int
	args     []string
	cred     *syscall.Credential // nil: run as ourselves
	logger   *slog.Logger

	mu     sync.Mutex // serializes Stop and Restart; guards proc and exited
	proc   *os.Process
	exited chan struct{} // closed once proc has exited
}

// Start starts a server on opts.Dir, initializing it first if needed, and
// returns once it accepts connections. A server left running on the same
// directory by a dead process is stopped first (see the package comment).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("pglocal: Options.Dir is empty")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dir, cred); err != nil {
		return nil, err
	}
	logger := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With("component", "pglocal")
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
		logger.Info("initializing data directory", "dir", dir)
		if err := initdb(ctx, bin, dir, cred, opts.Fast); err != nil {
			return nil, err
		}
	}
	if err := stopLeftover(ctx, dir, logger); err != nil {
		return nil, err
	}
	port := opts.Port
	if port == 0 {
		if port, err = freePort(ctx); err != nil {
			return nil, err
		}
	}
	c := &Cluster{bin: bin, dir: dir, port: port, args: serverArgs(dir, port, opts), cred: cred, logger: logger}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// URL returns the URL of database dbname on this server, as user postgres.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, url.PathEscape(dbname))
}

// Dir returns the data directory, an absolute path.
func (c *Cluster) Dir() string { return c.dir }

// Port returns the TCP port the server listens on, on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Stop shuts the server down fast (open transactions are rolled back) and
// waits for it to exit. If ctx ends first, the server is shut down
// immediately, and killed if even that hangs. Stopping a stopped cluster is
// a no-op.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stop(ctx)
}

// Restart stops the server, as Stop does, and starts it again on the same
// port: the equivalent of pg_ctl restart -m fast. It also starts a stopped
// cluster.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stop(ctx); err != nil {
		return err
	}
	return c.start(ctx)
}

// start runs postgres and waits until it accepts connections. c.mu is held.
func (c *Cluster) start(ctx context.Context) error {
	logPath := filepath.Join(c.dir, logName)
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	defer log.Close() // the child keeps its own descriptor
	if c.cred != nil {
		_ = log.Chown(int(c.cred.Uid), int(c.cred.Gid))
	}
	// The server outlives ctx: only Stop ends it.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), filepath.Join(c.bin, "postgres"), c.args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = c.dir, childEnv(), log, log
	cmd.SysProcAttr = sysProcAttr(c.cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	c.proc, c.exited = cmd.Process, exited

	if err := c.waitReady(ctx); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = c.stop(stopCtx)
		return fmt.Errorf("start postgres on %s: %w; end of %s:\n%s", c.dir, err, logPath, logTail(logPath))
	}
	c.logger.Info("postgres started", "dir", c.dir, "port", c.port, "pid", cmd.Process.Pid)
	return nil
}

// waitReady polls until the server accepts a connection, it exits, or
// startTimeout passes.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-c.exited:
			return errors.New("postgres exited")
		case <-ctx.Done():
			return fmt.Errorf("no connection: %w (last attempt: %w)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop shuts the server down and waits for it to exit. c.mu is held.
func (c *Cluster) stop(ctx context.Context) error {
	if c.proc == nil {
		return nil
	}
	proc, exited := c.proc, c.exited
	c.proc, c.exited = nil, nil
	_ = proc.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-exited:
		c.logger.Info("postgres stopped", "dir", c.dir, "port", c.port)
		return nil
	case <-ctx.Done():
	}
	_ = proc.Signal(syscall.SIGQUIT) // immediate shutdown
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = proc.Kill()
		<-exited
	}
	return fmt.Errorf("stop postgres: %w", ctx.Err())
}

// serverArgs returns the postgres command line.
func serverArgs(dir string, port int, opts Options) []string {
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": dir,
		"max_connections":         "200", // parallel tests, each with a pool
	}
	// A socket path is at most 103 bytes on macOS, 107 on Linux: a deep
	// directory gets TCP only rather than a server that will not start.
	if len(dir)+len("/.s.PGSQL.65535") > 103 {
		settings["unix_socket_directories"] = ""
	}
	if opts.Fast {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	maps.Copy(settings, opts.Settings)
	args := []string{"-D", dir, "-p", strconv.Itoa(port)}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", name+"="+settings[name])
	}
	return args
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(ctx context.Context) (int, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
