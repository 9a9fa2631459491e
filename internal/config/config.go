// Package config reads MaxQ's settings from environment variables (spec §7.1
// plus the engine's own). Parse takes a getenv function so tests never touch
// the process environment; every bad value is reported at once, each naming
// its variable.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Config is the configuration shared by MaxQ's binaries.
type Config struct {
	FlowsRoot   string // MAXQ_FLOWS_ROOT
	DatabaseURL string // MAXQ_DATABASE_URL; empty lets cmd/local start an embedded PostgreSQL
	Host        string // MAXQ_HOST
	Port        int    // MAXQ_PORT
	WatchFlows  bool   // MAXQ_WATCH_FLOWS: accepted; discovery is always fresh, so it changes nothing
	LogLevel    slog.Level

	// MaxConcurrentSteps is how many step scripts one worker runs at once.
	MaxConcurrentSteps int // MAXQ_MAX_CONCURRENT_STEPS
	// MaxConcurrentFlows is how many flow.sh calls one worker runs at once.
	MaxConcurrentFlows int // MAXQ_MAX_CONCURRENT_FLOWS
	// APIURL is the base URL scripts call back (MAXQ_API in their
	// environment). Empty means http://HOST:PORT/api/v1 of this process.
	APIURL string // MAXQ_API_URL
	// StepTimeout is the timeout of a step whose env sets no
	// MAXQ_STEP_TIMEOUT; zero means none.
	StepTimeout time.Duration // MAXQ_STEP_TIMEOUT (seconds)
	// FlowTimeout bounds one call of flow.sh.
	FlowTimeout time.Duration // MAXQ_FLOW_TIMEOUT (seconds)
	// MaxBodyBytes caps every request body.
	MaxBodyBytes int64 // MAXQ_MAX_BODY_BYTES
	// MaxLogBytes caps what one step attempt or flow call may write to the
	// log table; the rest is dropped after one truncation line.
	MaxLogBytes int64 // MAXQ_MAX_LOG_BYTES
	// PassEnv lists the worker's environment variables passed on to scripts.
	PassEnv []string // MAXQ_PASS_ENV (comma-separated)
	// PollInterval is how often a worker looks for work without a NOTIFY.
	PollInterval time.Duration // MAXQ_POLL_INTERVAL_MS
	// Listen turns LISTEN/NOTIFY wake-ups on; off, workers only poll.
	Listen bool // MAXQ_LISTEN
	// LeaseTTL: work of a worker whose heartbeat is older is recovered.
	LeaseTTL time.Duration // MAXQ_LEASE_TTL (seconds)
	// ReaperInterval is the time between reaper sweeps.
	ReaperInterval time.Duration // MAXQ_REAPER_INTERVAL (seconds)
	// ShutdownGrace is how long a stopping worker lets scripts finish.
	ShutdownGrace time.Duration // MAXQ_SHUTDOWN_GRACE (seconds)
	// MaxArtifactBytes caps one artifact's value.
	MaxArtifactBytes int64 // MAXQ_MAX_ARTIFACT_BYTES
	// APIToken, when set, is the bearer token every API request needs.
	APIToken string // MAXQ_API_TOKEN
}

// Defaults returns the specification's defaults. FlowsRoot and DatabaseURL
// have none.
func Defaults() Config {
	return Config{
		Host:               "0.0.0.0",
		Port:               3000,
		LogLevel:           slog.LevelInfo,
		MaxConcurrentSteps: 10,
		MaxConcurrentFlows: 4,
		FlowTimeout:        5 * time.Minute,
		MaxBodyBytes:       10 << 20,
		MaxLogBytes:        10 << 20,
		PassEnv:            []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM"},
		PollInterval:       2 * time.Second,
		Listen:             true,
		LeaseTTL:           15 * time.Second,
		ReaperInterval:     5 * time.Second,
		ShutdownGrace:      30 * time.Second,
		MaxArtifactBytes:   5 << 20,
	}
}

// Parse reads the configuration from getenv over the given defaults.
func Parse(getenv func(string) string, c Config) (Config, error) {
	p := parser{getenv: getenv}
	p.str("MAXQ_FLOWS_ROOT", &c.FlowsRoot)
	p.str("MAXQ_DATABASE_URL", &c.DatabaseURL)
	p.str("MAXQ_HOST", &c.Host)
	p.integer("MAXQ_PORT", &c.Port, 0, 65535)
	p.boolean("MAXQ_WATCH_FLOWS", &c.WatchFlows)
	p.level("MAXQ_LOG_LEVEL", &c.LogLevel)
	p.integer("MAXQ_MAX_CONCURRENT_STEPS", &c.MaxConcurrentSteps, 1, 10000)
	p.integer("MAXQ_MAX_CONCURRENT_FLOWS", &c.MaxConcurrentFlows, 1, 10000)
	p.str("MAXQ_API_URL", &c.APIURL)
	p.seconds("MAXQ_STEP_TIMEOUT", &c.StepTimeout, 0)
	p.seconds("MAXQ_FLOW_TIMEOUT", &c.FlowTimeout, 1)
	p.bytes("MAXQ_MAX_BODY_BYTES", &c.MaxBodyBytes, 1024)
	p.bytes("MAXQ_MAX_LOG_BYTES", &c.MaxLogBytes, 0)
	p.list("MAXQ_PASS_ENV", &c.PassEnv)
	p.millis("MAXQ_POLL_INTERVAL_MS", &c.PollInterval, 10)
	p.boolean("MAXQ_LISTEN", &c.Listen)
	p.seconds("MAXQ_LEASE_TTL", &c.LeaseTTL, 2)
	p.seconds("MAXQ_REAPER_INTERVAL", &c.ReaperInterval, 1)
	p.seconds("MAXQ_SHUTDOWN_GRACE", &c.ShutdownGrace, 1)
	p.bytes("MAXQ_MAX_ARTIFACT_BYTES", &c.MaxArtifactBytes, 1)
	p.str("MAXQ_API_TOKEN", &c.APIToken)
	if c.Host != "" && net.ParseIP(c.Host) == nil && !validHostname(c.Host) {
		p.fail("MAXQ_HOST", c.Host, "not an IP address or host name")
	}
	if c.APIURL != "" && !strings.HasPrefix(c.APIURL, "http://") && !strings.HasPrefix(c.APIURL, "https://") {
		p.fail("MAXQ_API_URL", c.APIURL, "must start with http:// or https://")
	}
	if c.APIToken != "" && len(c.APIToken) < 16 {
		p.errs = append(p.errs, errors.New("MAXQ_API_TOKEN: must be at least 16 characters"))
	}
	return c, errors.Join(p.errs...)
}

// ListenAddr is the HOST:PORT the HTTP server listens on.
func (c Config) ListenAddr() string {
	return net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
}

type parser struct {
	getenv func(string) string
	errs   []error
}

func (p *parser) fail(name, value, why string) {
	p.errs = append(p.errs, fmt.Errorf("%s=%q: %s", name, value, why))
}

func (p *parser) lookup(name string) (string, bool) {
	v := strings.TrimSpace(p.getenv(name))
	return v, v != ""
}

func (p *parser) str(name string, dst *string) {
	if v, ok := p.lookup(name); ok {
		*dst = v
	}
}

func (p *parser) integer(name string, dst *int, lo, hi int) {
	v, ok := p.lookup(name)
	if !ok {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.fail(name, v, fmt.Sprintf("must be a whole number from %d to %d", lo, hi))
		return
	}
	*dst = n
}

func (p *parser) bytes(name string, dst *int64, lo int64) {
	v, ok := p.lookup(name)
	if !ok {
		return
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo {
		p.fail(name, v, fmt.Sprintf("must be a number of bytes, at least %d", lo))
		return
	}
	*dst = n
}

func (p *parser) seconds(name string, dst *time.Duration, lo int) {
	v, ok := p.lookup(name)
	if !ok {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > 366*24*3600 {
		p.fail(name, v, fmt.Sprintf("must be a whole number of seconds, at least %d", lo))
		return
	}
	*dst = time.Duration(n) * time.Second
}

func (p *parser) millis(name string, dst *time.Duration, lo int) {
	v, ok := p.lookup(name)
	if !ok {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > 3600*1000 {
		p.fail(name, v, fmt.Sprintf("must be a whole number of milliseconds, at least %d", lo))
		return
	}
	*dst = time.Duration(n) * time.Millisecond
}

func (p *parser) boolean(name string, dst *bool) {
	v, ok := p.lookup(name)
	if !ok {
		return
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, v, "must be true or false")
		return
	}
	*dst = b
}

func (p *parser) level(name string, dst *slog.Level) {
	v, ok := p.lookup(name)
	if !ok {
		return
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		p.fail(name, v, "must be debug, info, warn or error")
		return
	}
	*dst = l
}

func (p *parser) list(name string, dst *[]string) {
	v, ok := p.lookup(name)
	if !ok {
		return
	}
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	*dst = out
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}
