package config_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/config"
)

// env is a fake environment for Parse.
type env map[string]string

func (e env) getenv(name string) string { return e[name] }

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Parse(env{}.getenv, config.Defaults())
	require.NoError(t, err)
	require.Equal(t, config.Defaults(), c)
	require.Equal(t, "0.0.0.0:3000", c.ListenAddr())
	require.Empty(t, c.FlowsRoot)
	require.Empty(t, c.DatabaseURL)

	// Blank and unset are the same: the defaults hold.
	blank := env{}
	for _, name := range variables {
		blank[name] = "  "
	}
	c, err = config.Parse(blank.getenv, config.Defaults())
	require.NoError(t, err)
	require.Equal(t, config.Defaults(), c)

	// Parse reads over whatever defaults it is given.
	custom := config.Defaults()
	custom.Port = 8080
	custom.FlowsRoot = "/srv/flows"
	c, err = config.Parse(env{"MAXQ_HOST": "127.0.0.1"}.getenv, custom)
	require.NoError(t, err)
	require.Equal(t, 8080, c.Port)
	require.Equal(t, "/srv/flows", c.FlowsRoot)
	require.Equal(t, "127.0.0.1:8080", c.ListenAddr())
}

// secrets are the variables whose values no message may repeat.
var secrets = map[string]bool{"MAXQ_API_TOKEN": true}

// variables are every variable Parse reads.
var variables = []string{
	"MAXQ_FLOWS_ROOT", "MAXQ_DATABASE_URL", "MAXQ_HOST", "MAXQ_PORT", "MAXQ_WATCH_FLOWS", "MAXQ_LOG_LEVEL",
	"MAXQ_MAX_CONCURRENT_STEPS", "MAXQ_MAX_CONCURRENT_FLOWS", "MAXQ_API_URL", "MAXQ_STEP_TIMEOUT",
	"MAXQ_FLOW_TIMEOUT", "MAXQ_MAX_BODY_BYTES", "MAXQ_MAX_LOG_BYTES", "MAXQ_PASS_ENV", "MAXQ_POLL_INTERVAL_MS",
	"MAXQ_LISTEN", "MAXQ_LEASE_TTL", "MAXQ_REAPER_INTERVAL", "MAXQ_SHUTDOWN_GRACE", "MAXQ_MAX_ARTIFACT_BYTES",
	"MAXQ_API_TOKEN",
}

func TestParseEveryVariable(t *testing.T) {
	t.Parallel()
	e := env{
		"MAXQ_FLOWS_ROOT":           "/srv/flows",
		"MAXQ_DATABASE_URL":         "postgresql://maxq@db/maxq?sslmode=disable",
		"MAXQ_HOST":                 "::1",
		"MAXQ_PORT":                 "8080",
		"MAXQ_WATCH_FLOWS":          "true",
		"MAXQ_LOG_LEVEL":            "debug",
		"MAXQ_MAX_CONCURRENT_STEPS": "32",
		"MAXQ_MAX_CONCURRENT_FLOWS": "8",
		"MAXQ_API_URL":              "https://maxq.example.com/api/v1",
		"MAXQ_STEP_TIMEOUT":         "600",
		"MAXQ_FLOW_TIMEOUT":         "90",
		"MAXQ_MAX_BODY_BYTES":       "1048576",
		"MAXQ_MAX_LOG_BYTES":        "0",
		"MAXQ_PASS_ENV":             "PATH, HOME,,AWS_REGION ",
		"MAXQ_POLL_INTERVAL_MS":     "250",
		"MAXQ_LISTEN":               "false",
		"MAXQ_LEASE_TTL":            "60",
		"MAXQ_REAPER_INTERVAL":      "10",
		"MAXQ_SHUTDOWN_GRACE":       "5",
		"MAXQ_MAX_ARTIFACT_BYTES":   "65536",
		"MAXQ_API_TOKEN":            "s3cret-token-of-32-characters-xx",
	}
	require.Len(t, e, len(variables), "every variable is set")
	c, err := config.Parse(e.getenv, config.Defaults())
	require.NoError(t, err)
	require.Equal(t, config.Config{
		FlowsRoot:          "/srv/flows",
		DatabaseURL:        "postgresql://maxq@db/maxq?sslmode=disable",
		Host:               "::1",
		Port:               8080,
		WatchFlows:         true,
		LogLevel:           slog.LevelDebug,
		MaxConcurrentSteps: 32,
		MaxConcurrentFlows: 8,
		APIURL:             "https://maxq.example.com/api/v1",
		StepTimeout:        10 * time.Minute,
		FlowTimeout:        90 * time.Second,
		MaxBodyBytes:       1 << 20,
		MaxLogBytes:        0,
		PassEnv:            []string{"PATH", "HOME", "AWS_REGION"},
		PollInterval:       250 * time.Millisecond,
		Listen:             false,
		LeaseTTL:           time.Minute,
		ReaperInterval:     10 * time.Second,
		ShutdownGrace:      5 * time.Second,
		MaxArtifactBytes:   64 << 10,
		APIToken:           "s3cret-token-of-32-characters-xx",
	}, c)
	require.Equal(t, "[::1]:8080", c.ListenAddr())
}

// TestParseValues covers each variable's accepted forms and bounds.
func TestParseValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		env   env
		check func(t *testing.T, c config.Config)
	}{
		{"SurroundingSpaceTrimmed", env{"MAXQ_PORT": " 8080\n", "MAXQ_FLOWS_ROOT": " /srv/flows "}, func(t *testing.T, c config.Config) {
			require.Equal(t, 8080, c.Port)
			require.Equal(t, "/srv/flows", c.FlowsRoot)
		}},
		{"PortZero", env{"MAXQ_PORT": "0"}, func(t *testing.T, c config.Config) { require.Equal(t, 0, c.Port) }},
		{"PortMax", env{"MAXQ_PORT": "65535"}, func(t *testing.T, c config.Config) { require.Equal(t, 65535, c.Port) }},
		{"HostName", env{"MAXQ_HOST": "maxq-1.internal.example.com"}, func(t *testing.T, c config.Config) {
			require.Equal(t, "maxq-1.internal.example.com", c.Host)
		}},
		{"HostIPv4", env{"MAXQ_HOST": "10.0.0.7"}, func(t *testing.T, c config.Config) { require.Equal(t, "10.0.0.7:3000", c.ListenAddr()) }},
		{"WatchFlowsOne", env{"MAXQ_WATCH_FLOWS": "1"}, func(t *testing.T, c config.Config) { require.True(t, c.WatchFlows) }},
		{"WatchFlowsFalse", env{"MAXQ_WATCH_FLOWS": "FALSE"}, func(t *testing.T, c config.Config) { require.False(t, c.WatchFlows) }},
		{"LogLevelWarn", env{"MAXQ_LOG_LEVEL": "warn"}, func(t *testing.T, c config.Config) { require.Equal(t, slog.LevelWarn, c.LogLevel) }},
		{"LogLevelUpperCase", env{"MAXQ_LOG_LEVEL": "ERROR"}, func(t *testing.T, c config.Config) { require.Equal(t, slog.LevelError, c.LogLevel) }},
		{"StepsBounds", env{"MAXQ_MAX_CONCURRENT_STEPS": "1", "MAXQ_MAX_CONCURRENT_FLOWS": "10000"}, func(t *testing.T, c config.Config) {
			require.Equal(t, 1, c.MaxConcurrentSteps)
			require.Equal(t, 10000, c.MaxConcurrentFlows)
		}},
		{"StepTimeoutZeroIsNone", env{"MAXQ_STEP_TIMEOUT": "0"}, func(t *testing.T, c config.Config) { require.Zero(t, c.StepTimeout) }},
		{"StepTimeoutYear", env{"MAXQ_STEP_TIMEOUT": "31622400"}, func(t *testing.T, c config.Config) {
			require.Equal(t, 366*24*time.Hour, c.StepTimeout)
		}},
		{"FlowTimeoutOneSecond", env{"MAXQ_FLOW_TIMEOUT": "1"}, func(t *testing.T, c config.Config) { require.Equal(t, time.Second, c.FlowTimeout) }},
		{"BodyBytesMinimum", env{"MAXQ_MAX_BODY_BYTES": "1024"}, func(t *testing.T, c config.Config) { require.Equal(t, int64(1024), c.MaxBodyBytes) }},
		{"LogBytesLarge", env{"MAXQ_MAX_LOG_BYTES": "9223372036854775807"}, func(t *testing.T, c config.Config) {
			require.Equal(t, int64(1<<63-1), c.MaxLogBytes)
		}},
		{"PollIntervalBounds", env{"MAXQ_POLL_INTERVAL_MS": "10"}, func(t *testing.T, c config.Config) {
			require.Equal(t, 10*time.Millisecond, c.PollInterval)
		}},
		{"PollIntervalHour", env{"MAXQ_POLL_INTERVAL_MS": "3600000"}, func(t *testing.T, c config.Config) { require.Equal(t, time.Hour, c.PollInterval) }},
		{"PassEnvOne", env{"MAXQ_PASS_ENV": "PATH"}, func(t *testing.T, c config.Config) { require.Equal(t, []string{"PATH"}, c.PassEnv) }},
		{"LeaseTTLMinimum", env{"MAXQ_LEASE_TTL": "2"}, func(t *testing.T, c config.Config) { require.Equal(t, 2*time.Second, c.LeaseTTL) }},
		{"ArtifactBytesOne", env{"MAXQ_MAX_ARTIFACT_BYTES": "1"}, func(t *testing.T, c config.Config) {
			require.Equal(t, int64(1), c.MaxArtifactBytes)
		}},
		{"APITokenSixteen", env{"MAXQ_API_TOKEN": "0123456789abcdef"}, func(t *testing.T, c config.Config) {
			require.Equal(t, "0123456789abcdef", c.APIToken)
		}},
		{"APIURLPlainHTTP", env{"MAXQ_API_URL": "http://localhost:3000/api/v1"}, func(t *testing.T, c config.Config) {
			require.Equal(t, "http://localhost:3000/api/v1", c.APIURL)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := config.Parse(c.env.getenv, config.Defaults())
			require.NoError(t, err)
			c.check(t, got)
		})
	}
}

// TestParseBadValues gives each variable a bad value: the error names that
// variable and its value — unless the value is a secret — and only it.
func TestParseBadValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		variable string
		value    string
	}{
		{"PortWord", "MAXQ_PORT", "http"},
		{"PortNegative", "MAXQ_PORT", "-1"},
		{"PortTooHigh", "MAXQ_PORT", "65536"},
		{"PortFraction", "MAXQ_PORT", "80.5"},
		{"PortExponent", "MAXQ_PORT", "8e3"},
		{"PortOverflow", "MAXQ_PORT", "99999999999999999999"},
		{"HostSpace", "MAXQ_HOST", "my host"},
		{"HostURL", "MAXQ_HOST", "http://localhost"},
		{"HostEmptyLabel", "MAXQ_HOST", "a..b"},
		{"HostLabelTooLong", "MAXQ_HOST", strings.Repeat("a", 64) + ".com"},
		{"HostTooLong", "MAXQ_HOST", strings.Repeat("abcdefghi.", 26)},
		{"WatchFlowsYes", "MAXQ_WATCH_FLOWS", "yes"},
		{"LogLevelUnknown", "MAXQ_LOG_LEVEL", "verbose"},
		{"LogLevelNumber", "MAXQ_LOG_LEVEL", "3"},
		{"StepsZero", "MAXQ_MAX_CONCURRENT_STEPS", "0"},
		{"StepsTooMany", "MAXQ_MAX_CONCURRENT_STEPS", "10001"},
		{"FlowsZero", "MAXQ_MAX_CONCURRENT_FLOWS", "0"},
		{"FlowsWord", "MAXQ_MAX_CONCURRENT_FLOWS", "many"},
		{"APIURLNoScheme", "MAXQ_API_URL", "localhost:3000/api/v1"},
		{"APIURLOtherScheme", "MAXQ_API_URL", "ftp://example.com"},
		{"StepTimeoutNegative", "MAXQ_STEP_TIMEOUT", "-1"},
		{"StepTimeoutDuration", "MAXQ_STEP_TIMEOUT", "10m"},
		{"StepTimeoutOverYear", "MAXQ_STEP_TIMEOUT", "31622401"},
		{"FlowTimeoutZero", "MAXQ_FLOW_TIMEOUT", "0"},
		{"FlowTimeoutFraction", "MAXQ_FLOW_TIMEOUT", "1.5"},
		{"BodyBytesTooSmall", "MAXQ_MAX_BODY_BYTES", "1023"},
		{"BodyBytesUnit", "MAXQ_MAX_BODY_BYTES", "10MiB"},
		{"BodyBytesOverflow", "MAXQ_MAX_BODY_BYTES", "9223372036854775808"},
		{"LogBytesNegative", "MAXQ_MAX_LOG_BYTES", "-1"},
		{"PollIntervalTooShort", "MAXQ_POLL_INTERVAL_MS", "9"},
		{"PollIntervalTooLong", "MAXQ_POLL_INTERVAL_MS", "3600001"},
		{"PollIntervalDuration", "MAXQ_POLL_INTERVAL_MS", "2s"},
		{"ListenOn", "MAXQ_LISTEN", "on"},
		{"LeaseTTLOneSecond", "MAXQ_LEASE_TTL", "1"},
		{"LeaseTTLDuration", "MAXQ_LEASE_TTL", "15s"},
		{"ReaperIntervalZero", "MAXQ_REAPER_INTERVAL", "0"},
		{"ShutdownGraceNegative", "MAXQ_SHUTDOWN_GRACE", "-30"},
		{"ArtifactBytesZero", "MAXQ_MAX_ARTIFACT_BYTES", "0"},
		{"ArtifactBytesUnit", "MAXQ_MAX_ARTIFACT_BYTES", "5MB"},
		{"APITokenShort", "MAXQ_API_TOKEN", "hunter2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse(env{c.variable: c.value}.getenv, config.Defaults())
			require.Error(t, err)
			msg := err.Error()
			require.NotContains(t, msg, "\n", "one problem, one line")
			if secrets[c.variable] {
				require.Contains(t, msg, c.variable)
				require.NotContains(t, msg, c.value, "a secret is never repeated")
				return
			}
			require.Contains(t, msg, c.variable+"=")
			require.Contains(t, msg, c.value)
			for _, other := range variables {
				if other != c.variable {
					require.NotContains(t, msg, other+"=")
				}
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	t.Parallel()
	bad := env{
		"MAXQ_PORT":                 "eighty",
		"MAXQ_WATCH_FLOWS":          "maybe",
		"MAXQ_LOG_LEVEL":            "loud",
		"MAXQ_MAX_CONCURRENT_STEPS": "0",
		"MAXQ_STEP_TIMEOUT":         "-5",
		"MAXQ_MAX_BODY_BYTES":       "1",
		"MAXQ_POLL_INTERVAL_MS":     "0",
		"MAXQ_HOST":                 "not a host",
		"MAXQ_API_URL":              "example.com",
		"MAXQ_LEASE_TTL":            "0",
		"MAXQ_API_TOKEN":            "short-secret",
		// Good values among the bad ones change nothing in the report.
		"MAXQ_FLOWS_ROOT":   "/srv/flows",
		"MAXQ_FLOW_TIMEOUT": "30",
	}
	_, err := config.Parse(bad.getenv, config.Defaults())
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 11, "one line per bad variable:\n%s", err)
	require.NotContains(t, err.Error(), "short-secret")
	for name := range bad {
		if name == "MAXQ_FLOWS_ROOT" || name == "MAXQ_FLOW_TIMEOUT" {
			require.NotContains(t, err.Error(), name)
			continue
		}
		require.Contains(t, err.Error(), name, "every bad variable is named")
	}
}
