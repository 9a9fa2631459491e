// Package api is MaxQ's HTTP/JSON API (spec §6) on net/http. Handlers only
// record intents in the store; they never spawn processes and keep no state
// between requests, so the same Handler serves a plain HTTP server and an
// AWS Lambda adapter. Every response, errors included, is JSON with an
// explicit status; bad input is a 4xx with the error body of spec §6.5.
package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/store"
)

// Prefix is where the API lives.
const Prefix = "/api/v1"

// Config configures a Handler.
type Config struct {
	Store   *store.Store
	Catalog flow.Catalog
	Logger  *slog.Logger
	// MaxBodyBytes caps every request body (default 10 MiB).
	MaxBodyBytes int64
	// MaxArtifactBytes caps one artifact's value (default 5 MiB).
	MaxArtifactBytes int64
	// Tokens checks bearer tokens; the zero value leaves the API open.
	Tokens auth.Tokens
}

type server struct {
	store       *store.Store
	catalog     flow.Catalog
	flows       *flow.Cache // the catalog's flows, for the endpoints that look one up
	logger      *slog.Logger
	maxBody     int64
	maxArtifact int64
	tokens      auth.Tokens
	watcher     *watcher
	artifacts   *artifactWriter
}

// access is who may call a route.
type access int

const (
	adminOnly access = iota // the API token only: trigger, list runs, cancel, retry
	anyCaller               // any valid token: list flows
	ownRun                  // the API token, or the run token of {runId}
	ownStep                 // the API token, or the run token of the run of {stepId}
)

// New returns the API as an http.Handler.
func New(c Config) http.Handler {
	s := &server{store: c.Store, catalog: c.Catalog, logger: c.Logger, maxBody: c.MaxBodyBytes,
		maxArtifact: c.MaxArtifactBytes, tokens: c.Tokens}
	s.watcher = newWatcher(c.Store, s.logger)
	s.artifacts = &artifactWriter{store: c.Store}
	s.flows = flow.NewCache(c.Catalog, flow.DefaultCacheTTL)
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.logger = s.logger.With("component", "api")
	if s.maxBody <= 0 {
		s.maxBody = 10 << 20
	}
	if s.maxArtifact <= 0 {
		s.maxArtifact = 5 << 20
	}
	mux := http.NewServeMux()
	route := func(pattern string, who access, h func(http.ResponseWriter, *http.Request) error) {
		method, p, _ := strings.Cut(pattern, " ")
		mux.Handle(method+" "+Prefix+p, s.handle(who, h))
	}
	route("GET /flows", anyCaller, s.flowList)
	route("POST /flows/{flowName}/runs", adminOnly, s.runTrigger)
	route("GET /runs", adminOnly, s.runList)
	route("GET /runs/{runId}", ownRun, s.runGet)
	route("GET /runs/{runId}/logs", ownRun, s.logList)
	route("POST /runs/{runId}/cancel", adminOnly, s.runCancel)
	route("POST /runs/{runId}/retry", adminOnly, s.runRetry)
	route("POST /runs/{runId}/steps", ownRun, s.stageSchedule)
	route("GET /runs/{runId}/steps", ownRun, s.stepList)
	route("GET /steps/{stepId}", ownStep, s.stepGet)
	route("PATCH /steps/{stepId}", ownStep, s.stepPatch)
	route("POST /runs/{runId}/artifacts", ownRun, s.artifactCreate)
	route("GET /runs/{runId}/artifacts", ownRun, s.artifactList)
	route("GET /runs/{runId}/artifacts/{artifactId}", ownRun, s.artifactGet)
	return s.guard(mux)
}

// handle adapts a handler that returns an error into an http.Handler that
// checks the caller's token against who may call the route, and answers
// any error with the error body.
func (s *server) handle(who access, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := s.authorize(r, who)
		if err == nil {
			err = h(w, r)
		}
		if err != nil {
			status, code, msg, details := statusFor(err)
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="maxq"`)
			}
			if status >= 500 {
				s.logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			writeError(w, status, code, msg, details)
		}
	})
}

// authorize checks the request's bearer token against who may call the
// route: 401 without a valid token, 403 with a run token outside its run.
func (s *server) authorize(r *http.Request, who access) error {
	caller, ok := s.tokens.Check(r)
	if !ok {
		return &httpError{status: http.StatusUnauthorized, code: CodeUnauthorized,
			message: "missing or invalid bearer token (Authorization: Bearer <token>)"}
	}
	if caller.Admin || who == anyCaller {
		return nil
	}
	forbidden := &httpError{status: http.StatusForbidden, code: CodeForbidden,
		message: "this token is valid only for its own run"}
	switch who {
	case ownRun:
		if r.PathValue("runId") == caller.RunID {
			return nil
		}
	case ownStep:
		st, err := s.store.StepGet(r.Context(), r.PathValue("stepId"))
		if err != nil {
			if errors.Is(err, core.ErrNotFound) {
				return forbidden
			}
			return err
		}
		if st.RunID == caller.RunID {
			return nil
		}
	}
	return forbidden
}

// guard answers what the routes cannot: paths with dot segments (which the
// mux would redirect), unknown routes and wrong methods (as JSON, not the
// mux's plain text), and panics (a 500 with the error body, logged).
func (s *server) guard(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.logger.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v)
				writeError(w, http.StatusInternalServerError, CodeInternal, "internal error", nil)
			}
		}()
		if !cleanPath(r.URL.Path) {
			writeError(w, http.StatusBadRequest, CodeValidation, "invalid path: dot segments and empty segments are not allowed", nil)
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			s.notRouted(w, r, mux)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// notRouted answers a request no route matches: 405 when the path exists
// with another method, else 404.
func (s *server) notRouted(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed,
			r.Method+" is not allowed here; use "+strings.Join(allowed, " or "), nil)
		return
	}
	writeError(w, http.StatusNotFound, CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path, nil)
}

// cleanPath reports whether p is absolute with no "." or ".." segment and no
// empty segment before its end.
func cleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		if seg == "." || seg == ".." || seg == "" && i < len(segs)-1 {
			return false
		}
	}
	return true
}
