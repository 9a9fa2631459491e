// Package auth decides who may call the API. With an API token configured,
// every request carries "Authorization: Bearer <token>": the API token
// itself, which may do anything, or a run token, which MaxQ gives each
// script it spawns (MAXQ_TOKEN) and which is valid only for that script's
// own run. Run tokens are HMACs keyed from the API token, so any API and
// worker process with the same MAXQ_API_TOKEN issues and accepts the same
// tokens, and nothing needs storing.
package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
)

// runTokenPrefix starts every run token.
const runTokenPrefix = "mxq_run."

// Tokens issues and checks tokens. The zero value (no API token) leaves the
// API open.
type Tokens struct {
	apiToken string
	key      []byte
}

// New returns Tokens for apiToken; "" means authentication is off.
func New(apiToken string) Tokens {
	if apiToken == "" {
		return Tokens{}
	}
	mac := hmac.New(sha256.New, []byte(apiToken))
	mac.Write([]byte("maxq run tokens v1"))
	return Tokens{apiToken: apiToken, key: mac.Sum(nil)}
}

// Enabled reports whether requests need a token.
func (t Tokens) Enabled() bool { return t.apiToken != "" }

// RunToken is the token of a script of run runID; "" when auth is off.
func (t Tokens) RunToken(runID string) string {
	if !t.Enabled() {
		return ""
	}
	return runTokenPrefix + runID + "." + t.sign(runID)
}

func (t Tokens) sign(runID string) string {
	mac := hmac.New(sha256.New, t.key)
	mac.Write([]byte("run:" + runID))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// Caller is who a request comes from.
type Caller struct {
	Admin bool   // holds the API token
	RunID string // holds the run token of this run
}

// Check reads the bearer token of r. ok is false when it is missing or not
// valid; with auth off every request is an admin.
func (t Tokens) Check(r *http.Request) (Caller, bool) {
	if !t.Enabled() {
		return Caller{Admin: true}, true
	}
	scheme, token, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return Caller{}, false
	}
	token = strings.TrimSpace(token)
	if subtle.ConstantTimeCompare([]byte(token), []byte(t.apiToken)) == 1 {
		return Caller{Admin: true}, true
	}
	rest, isRun := strings.CutPrefix(token, runTokenPrefix)
	if !isRun {
		return Caller{}, false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return Caller{}, false
	}
	runID, sig := rest[:i], rest[i+1:]
	if !hmac.Equal([]byte(sig), []byte(t.sign(runID))) {
		return Caller{}, false
	}
	return Caller{RunID: runID}, true
}
