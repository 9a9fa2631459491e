package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/store"
)

// Limits on what one request may ask for.
const (
	maxStepsPerStage = 10000 // instances summed over a stage
	maxInstances     = 10000
	maxRetries       = 100
	maxEnvVars       = 200
	maxTags          = 64
	maxArtifactName  = 256
	maxIdemKey       = 255
)

type pagination struct {
	Total  int `json:"total"`
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// --- flows

type flowJSON struct {
	Name  string   `json:"name"`
	Path  string   `json:"path"`
	Steps []string `json:"steps"`
}

type problemJSON struct {
	Path    string `json:"path"`
	Flow    string `json:"flow,omitempty"`
	Step    string `json:"step,omitempty"`
	Message string `json:"message"`
}

func (s *server) flowList(w http.ResponseWriter, r *http.Request) error {
	flows, problems, err := s.catalog.List()
	if err != nil {
		return fmt.Errorf("list flows: %w", err)
	}
	out := struct {
		Flows    []flowJSON    `json:"flows"`
		Problems []problemJSON `json:"problems"`
	}{Flows: []flowJSON{}, Problems: []problemJSON{}}
	for _, f := range flows {
		out.Flows = append(out.Flows, flowJSON{Name: f.Name, Path: f.Path, Steps: f.Steps})
	}
	for _, p := range problems {
		out.Problems = append(out.Problems, problemJSON(p))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// --- runs

type triggerRequest struct {
	Input    json.RawMessage `json:"input"`
	Metadata json.RawMessage `json:"metadata"`
}

func (s *server) runTrigger(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("flowName")
	if !core.ValidName(name) {
		return core.Invalid("flowName", "not a valid flow name")
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdemKey || !printable(key) {
		return core.Invalid("Idempotency-Key", fmt.Sprintf("must be printable text of at most %d bytes", maxIdemKey))
	}
	data, err := readBody(w, r, s.maxBody)
	if err != nil {
		return err
	}
	var req triggerRequest
	if len(strings.TrimSpace(string(data))) > 0 {
		if err := decodeJSON(data, &req); err != nil {
			return err
		}
	}
	if !objectOrNull(req.Metadata) {
		return core.Invalid("metadata", "must be an object")
	}
	if _, err := s.flows.Flow(name); err != nil {
		return err
	}
	run, created, err := s.store.RunCreate(r.Context(), store.RunCreateParams{
		FlowName: name, Input: req.Input, Metadata: req.Metadata, IdempotencyKey: key})
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	writeJSON(w, status, run)
	return nil
}

type runWithStages struct {
	core.Run
	Stages []core.Stage `json:"stages"`
	// Version changes whenever the run, a stage or a step changes; give it
	// back with waitForChangeMs to wait for the next change.
	Version string `json:"version"`
}

// maxWaitForChange bounds a long poll (API Gateway cuts requests at 30 s).
const maxWaitForChange = 25000

// runGet answers a run with its stages. With waitForChangeMs (and the
// version of a previous answer), it first waits up to that long for the run
// to change, so a client can follow a run without polling.
func (s *server) runGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("runId")
	q := newQuery(r)
	wait := q.integer("waitForChangeMs", 0, 0, maxWaitForChange)
	since := q.str("version")
	if err := q.err(); err != nil {
		return err
	}
	versions, err := s.store.RunVersions(r.Context(), []string{id})
	if err != nil {
		return err
	}
	if v, ok := versions[id]; ok && wait > 0 && v == since {
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(wait)*time.Millisecond)
		s.watcher.wait(ctx, id, since)
		cancel()
		if versions, err = s.store.RunVersions(r.Context(), []string{id}); err != nil {
			return err
		}
	}
	run, stages, err := s.store.RunGet(r.Context(), id)
	if err != nil {
		return err
	}
	if stages == nil {
		stages = []core.Stage{}
	}
	writeJSON(w, http.StatusOK, runWithStages{Run: run, Stages: stages, Version: versions[id]})
	return nil
}

// logList answers a run's log lines after a cursor: GET
// /runs/{id}/logs?stepId=&after=&limit=. Lines come in commit order; "next"
// is the cursor to pass as after to get the lines that come later (it is
// the cursor of the last line, or after itself when there is none), and no
// line ever appears behind a cursor once handed out.
func (s *server) logList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := store.LogListParams{
		RunID:  r.PathValue("runId"),
		StepID: q.str("stepId"),
		After:  q.str("after"),
		Limit:  q.integer("limit", 1000, 1, 10000),
	}
	if !store.ParseLogCursor(p.After) {
		q.errs = append(q.errs, core.Invalid("after", "not a cursor from this API (use the \"next\" of a previous answer)"))
	}
	if err := q.err(); err != nil {
		return err
	}
	lines, err := s.store.LogList(r.Context(), p)
	if err != nil {
		return err
	}
	next := p.After
	if len(lines) > 0 {
		next = lines[len(lines)-1].Cursor
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": lines, "next": next})
	return nil
}

// runCancel cancels a run; see store.RunCancel.
func (s *server) runCancel(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.store.RunCancel(r.Context(), r.PathValue("runId")); err != nil {
		return err
	}
	return s.runGet(w, r)
}

// runRetry resumes a failed run; see store.RunRetry.
func (s *server) runRetry(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.store.RunRetry(r.Context(), r.PathValue("runId")); err != nil {
		return err
	}
	return s.runGet(w, r)
}

var runStatuses = []string{"pending", "running", "completed", "failed", "cancelled"}

func (s *server) runList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := store.RunListParams{
		FlowName: q.name("flowName"),
		Status:   core.RunStatus(q.oneOf("status", "", runStatuses)),
		Page:     page(q, 20, 100, store.RunSortFields(), "desc"),
	}
	if err := q.err(); err != nil {
		return err
	}
	runs, total, err := s.store.RunList(r.Context(), p)
	if err != nil {
		return err
	}
	type runSummary struct {
		ID          string         `json:"id"`
		FlowName    string         `json:"flowName"`
		Status      core.RunStatus `json:"status"`
		CreatedAt   int64          `json:"createdAt"`
		StartedAt   *int64         `json:"startedAt"`
		CompletedAt *int64         `json:"completedAt"`
		DurationMs  *int64         `json:"durationMs"`
	}
	out := make([]runSummary, len(runs))
	for i, run := range runs {
		out[i] = runSummary{run.ID, run.FlowName, run.Status, run.CreatedAt, run.StartedAt, run.CompletedAt, run.DurationMs}
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out, "pagination": pagination{total, p.Limit, p.Offset}})
	return nil
}

func page(q *query, defLimit, maxLimit int, sortFields []string, defOrder string) store.Page {
	return store.Page{
		Limit:     q.integer("limit", defLimit, 1, maxLimit),
		Offset:    q.integer("offset", 0, 0, 1<<31-1),
		SortBy:    q.oneOf("sortBy", "createdAt", sortFields),
		SortOrder: q.oneOf("sortOrder", defOrder, []string{"asc", "desc"}),
	}
}

// --- stages and steps

type stepRequest struct {
	Name       *string            `json:"name"`
	DependsOn  []string           `json:"dependsOn"`
	Instances  *int               `json:"instances"`
	MaxRetries *int               `json:"maxRetries"`
	Env        map[string]*string `json:"env"`
}

type scheduleRequest struct {
	Stage *string       `json:"stage"`
	Final *bool         `json:"final"`
	Steps []stepRequest `json:"steps"`
}

func (s *server) stageSchedule(w http.ResponseWriter, r *http.Request) error {
	data, err := readBody(w, r, s.maxBody)
	if err != nil {
		return err
	}
	var req scheduleRequest
	if err := decodeJSON(data, &req); err != nil {
		return err
	}
	p, err := req.validate()
	if err != nil {
		return err
	}
	p.RunID = r.PathValue("runId")
	run, _, err := s.store.RunGet(r.Context(), p.RunID)
	if err != nil {
		return err
	}
	names := make([]string, len(p.Steps))
	for i, st := range p.Steps {
		names[i] = st.Name
	}
	f, err := s.flows.Flow(run.FlowName, names...)
	if err != nil {
		return fmt.Errorf("%w: the run's flow %s is no longer usable: %v", core.ErrConflict, run.FlowName, err)
	}
	var errs []error
	for i, st := range p.Steps {
		if !slices.Contains(f.Steps, st.Name) {
			errs = append(errs, core.Invalid(fmt.Sprintf("steps[%d].name", i),
				fmt.Sprintf("flow %s has no step %q (expected an executable %s)", f.Name, st.Name, s.catalog.StepScript(f.Name, st.Name))))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	stage, steps, replayed, err := s.store.StageSchedule(r.Context(), p)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if replayed {
		status = http.StatusOK // the same stage again: nothing new
	}
	type scheduled struct {
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Sequence int             `json:"sequence"`
		Status   core.StepStatus `json:"status"`
	}
	out := make([]scheduled, len(steps))
	for i, st := range steps {
		out[i] = scheduled{st.ID, st.Name, st.Sequence, st.Status}
	}
	writeJSON(w, status, map[string]any{"stage": stage.Name, "scheduled": len(steps), "steps": out})
	return nil
}

// validate checks a stage request and returns every problem at once.
func (req scheduleRequest) validate() (store.StageScheduleParams, error) {
	var errs []error
	bad := func(field, msg string) { errs = append(errs, core.Invalid(field, msg)) }
	var p store.StageScheduleParams
	switch {
	case req.Stage == nil:
		bad("stage", "is required")
	case !core.ValidName(*req.Stage):
		bad("stage", "must match [A-Za-z0-9][A-Za-z0-9_.-]* and be at most 128 characters")
	default:
		p.Stage = *req.Stage
	}
	if req.Final == nil {
		bad("final", "is required (true or false)")
	} else {
		p.Final = *req.Final
	}
	if len(req.Steps) == 0 {
		bad("steps", "must list at least one step")
	}
	seen := map[string]bool{}
	total := 0
	for i, st := range req.Steps {
		field := func(f string) string { return fmt.Sprintf("steps[%d].%s", i, f) }
		var spec store.StepSpec
		switch {
		case st.Name == nil:
			bad(field("name"), "is required")
		case !core.ValidName(*st.Name):
			bad(field("name"), "must match [A-Za-z0-9][A-Za-z0-9_.-]* and be at most 128 characters")
		case seen[*st.Name]:
			bad(field("name"), fmt.Sprintf("step %q is listed twice in this stage", *st.Name))
		default:
			spec.Name = *st.Name
			seen[spec.Name] = true
		}
		depSeen := map[string]bool{}
		for j, d := range st.DependsOn {
			switch {
			case !core.ValidName(d):
				bad(fmt.Sprintf("steps[%d].dependsOn[%d]", i, j), "not a valid step name")
			case !depSeen[d]:
				depSeen[d] = true
				spec.DependsOn = append(spec.DependsOn, d)
			}
		}
		if spec.DependsOn == nil {
			spec.DependsOn = []string{}
		}
		switch {
		case st.Instances == nil:
			bad(field("instances"), "is required (1 or more)")
		case *st.Instances < 1 || *st.Instances > maxInstances:
			bad(field("instances"), fmt.Sprintf("must be from 1 to %d", maxInstances))
		default:
			spec.Instances = *st.Instances
			total += spec.Instances
		}
		switch {
		case st.MaxRetries == nil:
			bad(field("maxRetries"), "is required (0 or more)")
		case *st.MaxRetries < 0 || *st.MaxRetries > maxRetries:
			bad(field("maxRetries"), fmt.Sprintf("must be from 0 to %d", maxRetries))
		default:
			spec.MaxRetries = *st.MaxRetries
		}
		env, timeout, err := validateEnv(st.Env, field("env"))
		if err != nil {
			errs = append(errs, err)
		}
		spec.Env, spec.TimeoutMs = env, timeout
		p.Steps = append(p.Steps, spec)
	}
	if total > maxStepsPerStage {
		bad("steps", fmt.Sprintf("a stage may hold at most %d step instances, not %d", maxStepsPerStage, total))
	}
	return p, errors.Join(errs...)
}

// validateEnv checks a step's env: POSIX names, no MAXQ_ variable but
// MAXQ_STEP_TIMEOUT (whole seconds, returned in milliseconds).
func validateEnv(env map[string]*string, field string) (map[string]string, int64, error) {
	var errs []error
	out := make(map[string]string, len(env))
	var timeout int64
	if len(env) > maxEnvVars {
		return nil, 0, core.Invalid(field, fmt.Sprintf("at most %d variables", maxEnvVars))
	}
	for k, v := range env {
		f := field + "." + k
		switch {
		case !envName(k):
			errs = append(errs, core.Invalid(f, "not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"))
		case v == nil:
			errs = append(errs, core.Invalid(f, "must be a string, not null"))
		case k == "MAXQ_STEP_TIMEOUT":
			n, err := strconv.ParseInt(*v, 10, 64)
			if err != nil || n < 1 || n > 366*24*3600 {
				errs = append(errs, core.Invalid(f, "must be a whole number of seconds from 1 to 31622400"))
				continue
			}
			timeout = n * 1000
			out[k] = *v
		case strings.HasPrefix(k, "MAXQ_"):
			errs = append(errs, core.Invalid(f, "MAXQ_ variables are set by MaxQ; only MAXQ_STEP_TIMEOUT may be given"))
		default:
			out[k] = *v
		}
	}
	return out, timeout, errors.Join(errs...)
}

func envName(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func (s *server) stepGet(w http.ResponseWriter, r *http.Request) error {
	st, err := s.store.StepGet(r.Context(), r.PathValue("stepId"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, stepJSON(st))
	return nil
}

// stepJSON fills the empty collections a step may hold so they encode as
// [] and {} rather than null.
func stepJSON(st core.Step) core.Step {
	if st.DependsOn == nil {
		st.DependsOn = []string{}
	}
	if st.Env == nil {
		st.Env = map[string]string{}
	}
	return st
}

var stepStatuses = []string{"pending", "running", "completed", "failed", "cancelled"}

func (s *server) stepList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := store.StepListParams{
		RunID:    r.PathValue("runId"),
		Stage:    q.name("stage"),
		Status:   core.StepStatus(q.oneOf("status", "", stepStatuses)),
		Name:     q.name("name"),
		Sequence: q.optionalInt("sequence", 0, maxInstances),
		Page:     page(q, 100, 1000, store.StepSortFields(), "asc"),
	}
	if err := q.err(); err != nil {
		return err
	}
	steps, total, err := s.store.StepList(r.Context(), p)
	if err != nil {
		return err
	}
	for i := range steps {
		steps[i] = stepJSON(steps[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"steps": steps, "pagination": pagination{total, p.Limit, p.Offset}})
	return nil
}

type patchRequest struct {
	Status *string         `json:"status"`
	Output json.RawMessage `json:"output"`
	Error  json.RawMessage `json:"error"`
	// Attempt (optional, MAXQ_STEP_ATTEMPT) fences the update to the
	// step's current attempt.
	Attempt *int `json:"attempt"`
}

// stepPatch lets a step (or an operator) report on a step: its output at
// any time before it finishes, and its end — status "completed" or "failed"
// — which applies exactly as if its script had exited. A failure reported
// this way is final (no retry). The script's own later exit is then ignored.
func (s *server) stepPatch(w http.ResponseWriter, r *http.Request) error {
	data, err := readBody(w, r, s.maxBody)
	if err != nil {
		return err
	}
	var req patchRequest
	if err := decodeJSON(data, &req); err != nil {
		return err
	}
	id := r.PathValue("stepId")
	attempt := 0
	if req.Attempt != nil {
		if *req.Attempt < 1 {
			return core.Invalid("attempt", "must be 1 or more")
		}
		attempt = *req.Attempt
	}
	var st core.Step
	switch {
	case req.Status == nil && req.Output == nil:
		return badRequest("nothing to update: give status, output or both", nil)
	case req.Status == nil && req.Error != nil:
		return core.Invalid("error", `is only accepted with status "failed"`)
	case req.Status == nil:
		st, err = s.store.StepSetOutput(r.Context(), id, req.Output, attempt)
	case *req.Status == string(core.StepCompleted) || *req.Status == string(core.StepFailed):
		completed := *req.Status == string(core.StepCompleted)
		if completed && req.Error != nil && string(req.Error) != "null" {
			return core.Invalid("error", `is only accepted with status "failed"`)
		}
		var stepErr json.RawMessage
		if !completed {
			detail := req.Error
			if detail == nil {
				detail = json.RawMessage("null")
			}
			stepErr, _ = json.Marshal(map[string]any{"reason": core.ReasonReported, "detail": detail})
		}
		var applied bool
		st, applied, err = s.store.StepFinish(r.Context(), store.StepFinishParams{
			StepID: id, Attempt: attempt, Completed: completed, Output: req.Output, Error: stepErr})
		if err == nil && !applied {
			return fmt.Errorf("%w: attempt %d of step %s is no longer current", core.ErrConflict, attempt, id)
		}
	default:
		return core.Invalid("status", `may be set to "completed" or "failed"`)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": st.ID, "status": st.Status, "output": st.Output, "completedAt": st.CompletedAt})
	return nil
}

// --- artifacts

type artifactRequest struct {
	StepID   *string         `json:"stepId"`
	StepName *string         `json:"stepName"`
	Sequence *int            `json:"sequence"`
	Name     *string         `json:"name"`
	Value    json.RawMessage `json:"value"`
	Tags     []string        `json:"tags"`
	Metadata json.RawMessage `json:"metadata"`
	// Attempt (optional, MAXQ_STEP_ATTEMPT) fences the write to the
	// step's current attempt.
	Attempt *int `json:"attempt"`
}

func (s *server) artifactCreate(w http.ResponseWriter, r *http.Request) error {
	data, err := readBody(w, r, s.maxBody)
	if err != nil {
		return err
	}
	var req artifactRequest
	if err := decodeJSON(data, &req); err != nil {
		return err
	}
	var errs []error
	bad := func(field, msg string) { errs = append(errs, core.Invalid(field, msg)) }
	if req.StepID == nil || *req.StepID == "" {
		bad("stepId", "is required")
	}
	if req.StepName == nil || !core.ValidName(*req.StepName) {
		bad("stepName", "is required and must be a valid step name")
	}
	if req.Sequence == nil || *req.Sequence < 0 {
		bad("sequence", "is required and must be 0 or more")
	}
	if req.Name == nil || !artifactName(*req.Name) {
		bad("name", fmt.Sprintf("is required: 1 to %d characters, no control characters or surrounding spaces", maxArtifactName))
	}
	if req.Value == nil || string(req.Value) == "null" {
		bad("value", "is required (any JSON but null)")
	}
	if int64(len(req.Value)) > s.maxArtifact {
		return &httpError{status: http.StatusRequestEntityTooLarge, code: CodeTooLarge,
			message: fmt.Sprintf("artifact value is %d bytes; the limit is %d (MAXQ_MAX_ARTIFACT_BYTES)", len(req.Value), s.maxArtifact),
			details: map[string]string{"value": "too large", "limit": strconv.FormatInt(s.maxArtifact, 10)}}
	}
	if len(req.Tags) > maxTags {
		bad("tags", fmt.Sprintf("at most %d tags", maxTags))
	}
	for i, tag := range req.Tags {
		if tag == "" || len(tag) > 128 || !printable(tag) {
			bad(fmt.Sprintf("tags[%d]", i), "must be 1 to 128 printable characters")
		}
	}
	if !objectOrNull(req.Metadata) {
		bad("metadata", "must be an object")
	}
	attempt := 0
	if req.Attempt != nil {
		if *req.Attempt < 1 {
			bad("attempt", "must be 1 or more")
		}
		attempt = *req.Attempt
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	a, err := s.artifacts.create(r.Context(), store.ArtifactCreateParams{
		RunID: r.PathValue("runId"), StepID: *req.StepID, StepName: *req.StepName, Sequence: *req.Sequence,
		Name: *req.Name, Value: req.Value, Tags: req.Tags, Metadata: req.Metadata, Attempt: attempt})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, artifactJSON(a))
	return nil
}

func artifactJSON(a core.Artifact) core.Artifact {
	if a.Tags == nil {
		a.Tags = []string{}
	}
	return a
}

func (s *server) artifactList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	var tags []string
	for _, t := range strings.Split(q.str("tags"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			tags = append(tags, t)
		}
	}
	p := store.ArtifactListParams{
		RunID:      r.PathValue("runId"),
		StepName:   q.name("stepName"),
		Sequence:   q.optionalInt("sequence", 0, maxInstances),
		Name:       q.str("name"),
		NamePrefix: q.str("namePrefix"),
		Tags:       tags,
		Page:       page(q, 100, 1000, store.ArtifactSortFields(), "desc"),
	}
	if err := q.err(); err != nil {
		return err
	}
	artifacts, total, err := s.store.ArtifactList(r.Context(), p)
	if err != nil {
		return err
	}
	for i := range artifacts {
		artifacts[i] = artifactJSON(artifacts[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"artifacts": artifacts, "pagination": pagination{total, p.Limit, p.Offset}})
	return nil
}

func (s *server) artifactGet(w http.ResponseWriter, r *http.Request) error {
	a, err := s.store.ArtifactGet(r.Context(), r.PathValue("runId"), r.PathValue("artifactId"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, artifactJSON(a))
	return nil
}

// --- small checks

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func artifactName(s string) bool {
	return s != "" && len(s) <= maxArtifactName && printable(s) && strings.TrimSpace(s) == s
}

func objectOrNull(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return t == "" || t == "null" || strings.HasPrefix(t, "{")
}
