package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/maxq-dev/maxq/internal/core"
)

// Error codes of the error body (spec §6.5).
const (
	CodeValidation       = "VALIDATION_ERROR"
	CodeNotFound         = "NOT_FOUND"
	CodeConflict         = "CONFLICT"
	CodeTooLarge         = "PAYLOAD_TOO_LARGE"
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	CodeUnauthorized     = "UNAUTHORIZED"
	CodeForbidden        = "FORBIDDEN"
	CodeInternal         = "INTERNAL_ERROR"
)

// errorBody is the error response of spec §6.5.
type errorBody struct {
	Error   string            `json:"error"`
	Code    string            `json:"code"`
	Details map[string]string `json:"details"`
}

// httpError is an error with its HTTP status and code already decided.
type httpError struct {
	status  int
	code    string
	message string
	details map[string]string
}

func (e *httpError) Error() string { return e.message }

func badRequest(message string, details map[string]string) error {
	return &httpError{status: http.StatusBadRequest, code: CodeValidation, message: message, details: details}
}

// statusFor maps an error to its status, code and message: core's sentinels
// to 400/404/409, anything unexpected to 500.
func statusFor(err error) (int, string, string, map[string]string) {
	var he *httpError
	if errors.As(err, &he) {
		return he.status, he.code, he.message, he.details
	}
	if fields := fieldErrors(err); len(fields) > 0 {
		details := map[string]string{}
		var parts []string
		for _, f := range fields {
			if prev, ok := details[f.Field]; ok {
				details[f.Field] = prev + "; " + f.Message
			} else {
				details[f.Field] = f.Message
			}
			parts = append(parts, f.Error())
		}
		return http.StatusBadRequest, CodeValidation, "invalid request: " + strings.Join(parts, "; "), details
	}
	switch {
	case errors.Is(err, core.ErrInvalid):
		return http.StatusBadRequest, CodeValidation, cleanMessage(err), nil
	case errors.Is(err, core.ErrNotFound):
		return http.StatusNotFound, CodeNotFound, cleanMessage(err), nil
	case errors.Is(err, core.ErrConflict):
		return http.StatusConflict, CodeConflict, cleanMessage(err), nil
	}
	return http.StatusInternalServerError, CodeInternal, "internal error", nil
}

// cleanMessage turns a wrapped error into a message for the caller, without
// the sentinel's own words in the middle ("schedule stage: conflict: …").
func cleanMessage(err error) string {
	msg := err.Error()
	for _, s := range []error{core.ErrConflict, core.ErrInvalid} {
		msg = strings.ReplaceAll(msg, s.Error()+": ", "")
	}
	return msg
}

// fieldErrors collects every core.FieldError in err's tree.
func fieldErrors(err error) []*core.FieldError {
	var out []*core.FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*core.FieldError); ok {
			out = append(out, fe)
			return
		}
		switch x := e.(type) {
		case interface{ Unwrap() []error }:
			for _, inner := range x.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		}
	}
	walk(err)
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":"internal error","code":"INTERNAL_ERROR","details":{}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func writeError(w http.ResponseWriter, status int, code, message string, details map[string]string) {
	if details == nil {
		details = map[string]string{}
	}
	writeJSON(w, status, errorBody{Error: message, Code: code, Details: details})
}
