package cli

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/maxq-dev/maxq/internal/core"
)

// The API's objects are core's: the wire format has one definition. -o json
// prints the API's own bytes, not these.

type runJSON struct {
	core.Run
	Stages  []stageJSON `json:"stages"`
	Version string      `json:"version"`
}

func (r runJSON) terminal() bool { return r.Status.Terminal() }

type stageJSON = core.Stage

type stepJSON struct{ core.Step }

func (s stepJSON) terminal() bool { return s.Status.Terminal() }

// label is "name[sequence]".
func (s stepJSON) label() string { return s.Name + "[" + strconv.Itoa(s.Sequence) + "]" }

type artifactJSON = core.Artifact

type paginationJSON struct {
	Total  int `json:"total"`
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

type logJSON struct {
	Seq        int64   `json:"seq"`
	StepID     *string `json:"stepId"`
	StepName   *string `json:"stepName"`
	Sequence   *int    `json:"sequence"`
	FlowCallID *string `json:"flowCallId"`
	Level      string  `json:"level"`
	Message    string  `json:"message"`
	Data       struct {
		Stream  string `json:"stream"`
		Attempt int    `json:"attempt"`
	} `json:"data"`
	CreatedAt int64 `json:"createdAt"`
}

// prefix is "[step[seq]]" for a step's line and "[flow]" for flow.sh's.
func (l logJSON) prefix() string {
	if l.StepName != nil && l.Sequence != nil {
		return "[" + *l.StepName + "[" + strconv.Itoa(*l.Sequence) + "]]"
	}
	if l.StepID != nil {
		return "[step " + *l.StepID + "]"
	}
	return "[flow]"
}

// errorSummary turns an error object of the API ({"reason": …, …}) into one
// short line: the reason, then the details that say most.
func errorSummary(raw json.RawMessage) string {
	t := strings.TrimSpace(string(raw))
	if t == "" || t == "null" {
		return ""
	}
	var obj map[string]any
	if json.Unmarshal(raw, &obj) != nil {
		return oneLine(t)
	}
	var parts []string
	if r, ok := obj["reason"]; ok {
		parts = append(parts, fmt.Sprint(r))
	}
	for _, k := range []string{"cause", "stage", "failedStage", "failed_step", "exitCode", "timeoutMs"} {
		if v, ok := obj[k]; ok && v != nil {
			parts = append(parts, k+"="+compact(v))
		}
	}
	if d, ok := obj["detail"]; ok && d != nil {
		parts = append(parts, compact(d))
	}
	var rest []string
	for k, v := range obj {
		switch k {
		case "reason", "cause", "stage", "failedStage", "failed_step", "exitCode", "timeoutMs", "detail", "stderr", "completedStage":
			continue
		}
		rest = append(rest, k+"="+compact(v))
	}
	sort.Strings(rest)
	parts = append(parts, rest...)
	if s, ok := obj["stderr"].(string); ok && strings.TrimSpace(s) != "" {
		parts = append(parts, "stderr: "+lastLines(s, 3))
	}
	return strings.Join(parts, " ")
}

// compact is v as text: a string as is, anything else as JSON.
func compact(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// lastLines is the last n non-empty lines of s, joined with " | ".
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
