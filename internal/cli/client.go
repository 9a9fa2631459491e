package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Timeouts of the HTTP client. A long poll waits up to longPollWait on the
// server, so its request gets that much more time than an ordinary one.
const (
	requestTimeout = 60 * time.Second
	longPollWait   = 20 * time.Second
	dialTimeout    = 10 * time.Second
)

// Retries of idempotent requests: when the API cannot be reached or a proxy
// says it is unavailable, try again after 0.5 s, 1 s, 2 s, 4 s and 8 s, so
// a CI job rides out an API restart.
const (
	maxAttempts  = 6
	firstBackoff = 500 * time.Millisecond
	maxBackoff   = 8 * time.Second
)

// client speaks MaxQ's HTTP API.
type client struct {
	base  string // …/api/v1, no trailing slash
	token string
	http  *http.Client
	// backoff is the wait before attempt n+1 (n from 1); tests shorten it.
	backoff func(n int) time.Duration
}

func newClient(base, token string) *client {
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   dialTimeout,
		ResponseHeaderTimeout: longPollWait + 30*time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   4,
		ForceAttemptHTTP2:     true,
	}
	return &client{
		base:  strings.TrimRight(base, "/"),
		token: token,
		http:  &http.Client{Transport: transport},
		backoff: func(n int) time.Duration {
			return min(firstBackoff<<(n-1), maxBackoff)
		},
	}
}

// APIError is an error answer of the API: its status and error body.
type APIError struct {
	Status  int
	Code    string
	Message string
	Details map[string]string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	code := e.Code
	if code == "" {
		code = strings.ToUpper(strings.ReplaceAll(http.StatusText(e.Status), " ", "_"))
	}
	s := fmt.Sprintf("%s (HTTP %d %s)", msg, e.Status, code)
	if e.Status == http.StatusUnauthorized {
		s += "; set MAXQ_API_TOKEN or --token"
	}
	return s
}

// unreachableError says the API did not answer.
type unreachableError struct {
	base string
	err  error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the API at %s (set MAXQ_URL or --url): %v", e.base, e.err)
}

func (e *unreachableError) Unwrap() error { return e.err }

// networkError reports whether err, from sending a request, is the
// network's: nothing listening, a connection cut, no answer in time.
func networkError(err error) bool {
	var opErr *net.OpError
	var dnsErr *net.DNSError
	var netErr net.Error
	return errors.As(err, &opErr) || errors.As(err, &dnsErr) || errors.As(err, &netErr) && netErr.Timeout() ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// transient reports whether err may pass if the request is tried again
// later: no answer, or a gateway that could not reach the API.
func transient(err error) bool {
	var ue *unreachableError
	if errors.As(err, &ue) {
		return true
	}
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

// request is one API call.
type request struct {
	method string
	path   string     // under the base URL, starting with "/"
	query  url.Values // may be nil
	body   []byte     // JSON, or nil
	header http.Header
	// retry makes a request that failed transiently go again; set it only
	// for requests that are safe to repeat.
	retry bool
	// wait is how long the server may hold the request (a long poll).
	wait time.Duration
}

// do sends r and returns the body of a 2xx answer, or an *APIError, or an
// *unreachableError.
func (c *client) do(ctx context.Context, r request) ([]byte, int, error) {
	for attempt := 1; ; attempt++ {
		body, status, err := c.once(ctx, r)
		if err == nil || !r.retry || !transient(err) || attempt >= maxAttempts || ctx.Err() != nil {
			return body, status, err
		}
		if sleep(ctx, c.backoff(attempt)) != nil {
			return body, status, err
		}
	}
}

func (c *client) once(parent context.Context, r request) ([]byte, int, error) {
	timeout := requestTimeout + r.wait
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var rd io.Reader
	if r.body != nil {
		rd = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, rd)
	if err != nil {
		return nil, 0, fmt.Errorf("bad API URL %q: %w", c.base, err)
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "maxq-cli")
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		if parent.Err() != nil {
			return nil, 0, parent.Err()
		}
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("no answer within %s", timeout)
		case !networkError(err):
			return nil, 0, fmt.Errorf("%s %s: %w", r.method, u, err)
		}
		return nil, 0, &unreachableError{base: c.base, err: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, res.StatusCode, &unreachableError{base: c.base, err: fmt.Errorf("read answer: %w", err)}
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return data, res.StatusCode, nil
	}
	return nil, res.StatusCode, apiError(res.StatusCode, data)
}

// apiError reads an error answer: the API's error body, or whatever a proxy
// in between said.
func apiError(status int, data []byte) *APIError {
	e := &APIError{Status: status}
	var body struct {
		Error   string            `json:"error"`
		Code    string            `json:"code"`
		Details map[string]string `json:"details"`
	}
	if json.Unmarshal(data, &body) == nil && body.Error != "" {
		e.Message, e.Code, e.Details = body.Error, body.Code, body.Details
		return e
	}
	text := strings.TrimSpace(string(data))
	if i := strings.IndexByte(text, '\n'); i >= 0 {
		text = text[:i]
	}
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	e.Message = text
	return e
}

// getJSON GETs path (retrying) and decodes the answer into out; it returns
// the raw answer too, for -o json.
func (c *client) getJSON(ctx context.Context, path string, query url.Values, out any) ([]byte, error) {
	data, _, err := c.do(ctx, request{method: http.MethodGet, path: path, query: query, retry: true})
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("the API answered something that is not the expected JSON: %w", err)
		}
	}
	return data, nil
}

// sendJSON sends a request with a JSON body and decodes the answer.
func (c *client) sendJSON(ctx context.Context, r request, out any) ([]byte, int, error) {
	data, status, err := c.do(ctx, r)
	if err != nil {
		return nil, status, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, status, fmt.Errorf("the API answered something that is not the expected JSON: %w", err)
		}
	}
	return data, status, nil
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pathEscape escapes one path segment (an id or a name from the user).
func pathEscape(s string) string { return url.PathEscape(s) }
