package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// stageSpec is the body of POST /runs/{id}/steps.
type stageSpec struct {
	Stage string     `json:"stage"`
	Final bool       `json:"final"`
	Steps []stepSpec `json:"steps"`
}

type stepSpec struct {
	Name       string            `json:"name"`
	DependsOn  []string          `json:"dependsOn,omitempty"`
	Instances  int               `json:"instances"`
	MaxRetries int               `json:"maxRetries"`
	Env        map[string]string `json:"env,omitempty"`
}

// call sends a request to the API and decodes a 2xx answer into out (if
// not nil); any other status is an error.
func (st *stack) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, st.apiURL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := st.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode/100 != 2 {
		return &apiError{status: res.StatusCode, msg: fmt.Sprintf("%s %s: %s: %s", method, path, res.Status, bytes.TrimSpace(raw))}
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// trigger starts a run of flow and returns its id.
func (st *stack) trigger(ctx context.Context, flow string) (string, error) {
	var run struct{ ID string }
	if err := st.call(ctx, http.MethodPost, "/flows/"+flow+"/runs", map[string]any{}, &run); err != nil {
		return "", err
	}
	return run.ID, nil
}

// scheduledStep is a step instance the API created.
type scheduledStep struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Sequence int    `json:"sequence"`
}

// schedule adds a stage to a run and returns its step instances.
func (st *stack) schedule(ctx context.Context, runID string, stage stageSpec) ([]scheduledStep, error) {
	var out struct {
		Steps []scheduledStep `json:"steps"`
	}
	if err := st.call(ctx, http.MethodPost, "/runs/"+runID+"/steps", stage, &out); err != nil {
		return nil, err
	}
	return out.Steps, nil
}

// cancel cancels a run; one that has already ended is left as it is.
func (st *stack) cancel(ctx context.Context, runID string) error {
	err := st.call(ctx, http.MethodPost, "/runs/"+runID+"/cancel", nil, nil)
	if e, ok := errors.AsType[*apiError](err); ok && e.status == http.StatusConflict {
		return nil
	}
	return err
}

// apiError is an answer of the API other than 2xx.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }
