// Package core is MaxQ's vocabulary: runs, stages, steps, flow calls and
// artifacts, their statuses and the transitions between them, and the
// sentinel errors every layer speaks. It does no I/O.
package core

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"regexp"
	"strconv"
	"time"
)

// Sentinel errors. Layers wrap them with detail; the API maps them to status
// codes (ErrNotFound → 404, ErrConflict → 409, ErrInvalid → 400).
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	ErrInvalid  = errors.New("invalid")
)

// FieldError is a validation problem with one field of a request. Several are
// joined with errors.Join so a caller sees every problem at once.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Is makes every FieldError an ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns a FieldError for field.
func Invalid(field, message string) error { return &FieldError{Field: field, Message: message} }

// namePattern is what flow, step and stage names may look like: no slash, no
// leading dot, so no name can escape FLOWS_ROOT.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// MaxNameLength bounds flow, step, stage and artifact names.
const MaxNameLength = 128

// ValidName reports whether s may name a flow, a step or a stage.
func ValidName(s string) bool {
	return len(s) <= MaxNameLength && namePattern.MatchString(s)
}

// RunStatus is the state of a run: pending → running → completed | failed | cancelled.
type RunStatus string

const (
	RunPending   RunStatus = "pending"
	RunRunning   RunStatus = "running"
	RunCompleted RunStatus = "completed"
	RunFailed    RunStatus = "failed"
	RunCancelled RunStatus = "cancelled"
)

// Valid reports whether s is a known run status.
func (s RunStatus) Valid() bool {
	switch s {
	case RunPending, RunRunning, RunCompleted, RunFailed, RunCancelled:
		return true
	}
	return false
}

// Terminal reports whether a run in status s is finished for good.
func (s RunStatus) Terminal() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// StageStatus is the state of a stage: running → completed | failed | cancelled.
type StageStatus string

const (
	StageRunning   StageStatus = "running"
	StageCompleted StageStatus = "completed"
	StageFailed    StageStatus = "failed"
	StageCancelled StageStatus = "cancelled"
)

// Terminal reports whether a stage in status s has ended.
func (s StageStatus) Terminal() bool {
	return s == StageCompleted || s == StageFailed || s == StageCancelled
}

// StepStatus is the state of a step: pending → running → completed | failed |
// cancelled, and running → pending when an attempt fails and retries remain.
type StepStatus string

const (
	StepPending   StepStatus = "pending"
	StepRunning   StepStatus = "running"
	StepCompleted StepStatus = "completed"
	StepFailed    StepStatus = "failed"
	StepCancelled StepStatus = "cancelled"
)

// Valid reports whether s is a known step status.
func (s StepStatus) Valid() bool {
	switch s {
	case StepPending, StepRunning, StepCompleted, StepFailed, StepCancelled:
		return true
	}
	return false
}

// Terminal reports whether a step in status s is finished for good.
func (s StepStatus) Terminal() bool {
	return s == StepCompleted || s == StepFailed || s == StepCancelled
}

// FlowCallStatus is the state of one call of flow.sh.
type FlowCallStatus string

const (
	FlowCallPending   FlowCallStatus = "pending"
	FlowCallRunning   FlowCallStatus = "running"
	FlowCallCompleted FlowCallStatus = "completed"
	FlowCallFailed    FlowCallStatus = "failed"
	FlowCallCancelled FlowCallStatus = "cancelled"
)

// Reason is the machine-readable cause in an error object.
type Reason string

const (
	ReasonExitCode         Reason = "exit_code"
	ReasonTimeout          Reason = "timeout"
	ReasonDependencyFailed Reason = "dependency_failed"
	ReasonWorkerLost       Reason = "worker_lost"
	ReasonCancelled        Reason = "cancelled"
	ReasonFlowFailed       Reason = "flow_failed"
	ReasonReported         Reason = "reported"
	ReasonStageFailed      Reason = "stage_failed"
	ReasonStartFailed      Reason = "start_failed"
)

// Run is one execution of a flow.
type Run struct {
	ID          string          `json:"id"`
	FlowName    string          `json:"flowName"`
	Status      RunStatus       `json:"status"`
	Input       json.RawMessage `json:"input"`
	Output      json.RawMessage `json:"output"`
	Error       json.RawMessage `json:"error"`
	Metadata    json.RawMessage `json:"metadata"`
	CreatedAt   int64           `json:"createdAt"`
	StartedAt   *int64          `json:"startedAt"`
	CompletedAt *int64          `json:"completedAt"`
	DurationMs  *int64          `json:"durationMs"`
}

// Stage is a named batch of steps scheduled together by a flow.
type Stage struct {
	ID          string      `json:"-"`
	RunID       string      `json:"-"`
	Name        string      `json:"name"`
	Status      StageStatus `json:"status"`
	Final       bool        `json:"final"`
	CreatedAt   int64       `json:"createdAt"`
	CompletedAt *int64      `json:"completedAt"`
}

// Step is one instance of a step script in a run.
type Step struct {
	ID          string            `json:"id"`
	RunID       string            `json:"runId"`
	Stage       string            `json:"stage"`
	Name        string            `json:"name"`
	Sequence    int               `json:"sequence"`
	Status      StepStatus        `json:"status"`
	DependsOn   []string          `json:"dependsOn"`
	RetryCount  int               `json:"retryCount"`
	MaxRetries  int               `json:"maxRetries"`
	Env         map[string]string `json:"env"`
	Output      json.RawMessage   `json:"output"`
	Error       json.RawMessage   `json:"error"`
	CreatedAt   int64             `json:"createdAt"`
	StartedAt   *int64            `json:"startedAt"`
	CompletedAt *int64            `json:"completedAt"`
	DurationMs  *int64            `json:"durationMs"`
	Instances   int               `json:"instances"`
	Attempt     int               `json:"attempt"`
	ExitCode    *int              `json:"exitCode"`
}

// Artifact is JSON a step stored for later steps, at
// "stepName[sequence]/name" in its run.
type Artifact struct {
	ID        string          `json:"id"`
	RunID     string          `json:"runId"`
	StepID    string          `json:"stepId"`
	StepName  string          `json:"stepName"`
	Sequence  int             `json:"sequence"`
	Name      string          `json:"name"`
	FullPath  string          `json:"fullPath"`
	Value     json.RawMessage `json:"value"`
	Tags      []string        `json:"tags"`
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt int64           `json:"createdAt"`
}

// FullPath is the artifact path of name stored by a step instance.
func FullPath(stepName string, sequence int, name string) string {
	return stepName + "[" + strconv.Itoa(sequence) + "]/" + name
}

// Backoff is the delay before retry number retry (1 for the first retry):
// one second doubling per retry, capped at a minute, with ±20% jitter so
// that steps failing together do not retry in lockstep.
func Backoff(retry int) time.Duration {
	d := time.Second
	for i := 1; i < retry && d < time.Minute; i++ {
		d *= 2
	}
	d = min(d, time.Minute)
	return d - d/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}
