package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/maxq-dev/maxq/internal/core"
)

// maxJSONDepth bounds the nesting of any JSON a caller sends.
const maxJSONDepth = 64

// readBody reads a request body of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, &httpError{status: http.StatusRequestEntityTooLarge, code: CodeTooLarge,
			message: fmt.Sprintf("request body exceeds %d bytes", limit), details: map[string]string{"limit": strconv.FormatInt(limit, 10)}}
	}
	if err != nil {
		return nil, badRequest("cannot read request body: "+err.Error(), nil)
	}
	return data, nil
}

// decodeJSON decodes a JSON object into dst, strictly: the body must be
// valid UTF-8 and JSON, nested at most maxJSONDepth deep, hold no NUL
// character (PostgreSQL cannot store one), name no unknown field and carry
// nothing after the object. Type errors name the field.
func decodeJSON(data []byte, dst any) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return badRequest("request body is empty; expected a JSON object", nil)
	}
	if err := checkJSON(data); err != nil {
		return err
	}
	if trimmed[0] != '{' {
		return badRequest("request body must be a JSON object", nil)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("request body holds more than one JSON value", nil)
	}
	return nil
}

// checkJSON validates JSON text the way decodeJSON does, without decoding
// it: for raw values (input, artifact values) and for request bodies.
// Text that passes the fast checks of jsonWithinLimits is answered at once;
// only the rest is read token by token, which names what is wrong and is
// several times slower.
func checkJSON(data []byte) error {
	if utf8.Valid(data) && json.Valid(data) && jsonWithinLimits(data) {
		return nil
	}
	return checkJSONTokens(data)
}

// maxExactDigits is how many digits an integer may have and certainly be
// a float64 without overflowing.
const maxExactDigits = 15

// jsonWithinLimits reports whether valid JSON text keeps to what
// checkJSONTokens demands: nesting at most maxJSONDepth deep, no \u0000 in
// any string (in valid JSON, the only way for one to hold NUL) and no
// number beyond float64. It reads the text once and allocates only to
// parse a number that is not a short integer.
func jsonWithinLimits(data []byte) bool {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '{' || c == '[':
			if depth++; depth > maxJSONDepth {
				return false
			}
		case c == '}' || c == ']':
			depth--
		case c == '"':
			for i++; data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
					if data[i] == 'u' && string(data[i+1:i+5]) == "0000" {
						return false
					}
				}
			}
		case c == '-' || '0' <= c && c <= '9':
			j, digits, plain := i, 0, true
			for ; j < len(data) && strings.IndexByte("+-.eE0123456789", data[j]) >= 0; j++ {
				if '0' <= data[j] && data[j] <= '9' {
					digits++
				} else if data[j] != '-' || j > i {
					plain = false
				}
			}
			if !plain || digits > maxExactDigits {
				if _, err := strconv.ParseFloat(string(data[i:j]), 64); err != nil {
					return false
				}
			}
			i = j - 1
		}
	}
	return true
}

// checkJSONTokens is checkJSON the slow way, reading token by token.
func checkJSONTokens(data []byte) error {
	if !utf8.Valid(data) {
		return badRequest("request body is not valid UTF-8", nil)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return decodeError(err)
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
				if depth > maxJSONDepth {
					return badRequest(fmt.Sprintf("JSON nested deeper than %d levels", maxJSONDepth), nil)
				}
			} else {
				depth--
			}
		case string:
			if strings.IndexByte(v, 0) >= 0 {
				return badRequest(`JSON strings must not contain the NUL character (\u0000)`, nil)
			}
		case json.Number:
			if _, err := strconv.ParseFloat(string(v), 64); err != nil {
				return badRequest("JSON number out of range: "+truncate(string(v), 40), nil)
			}
		}
	}
}

func decodeError(err error) error {
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return badRequest(fmt.Sprintf("malformed JSON at byte %d: %s", syntax.Offset, syntax.Error()), nil)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return badRequest("request body must be a JSON object", nil)
		}
		return core.Invalid(typeErr.Field, fmt.Sprintf("must be %s, not %s", jsonType(typeErr.Type.String()), typeErr.Value))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("malformed JSON: unexpected end of input", nil)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return core.Invalid(field, "unknown field")
	}
	return badRequest("malformed JSON: "+err.Error(), nil)
}

// jsonType names a Go type the way a JSON caller thinks of it.
func jsonType(goType string) string {
	switch {
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "*int"):
		return "a whole number"
	case goType == "string", goType == "*string":
		return "a string"
	case goType == "bool", goType == "*bool":
		return "true or false"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["):
		return "an object"
	}
	return "of type " + goType
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// query reads validated URL query parameters, collecting every problem.
type query struct {
	values map[string][]string
	errs   []error
}

func newQuery(r *http.Request) *query { return &query{values: r.URL.Query()} }

func (q *query) str(name string) string {
	v := q.values[name]
	if len(v) == 0 {
		return ""
	}
	if !utf8.ValidString(v[0]) || strings.IndexByte(v[0], 0) >= 0 {
		q.errs = append(q.errs, core.Invalid(name, "must be valid UTF-8 text"))
		return ""
	}
	return v[0]
}

// name reads a flow, step or stage name.
func (q *query) name(name string) string {
	v := q.str(name)
	if v != "" && !core.ValidName(v) {
		q.errs = append(q.errs, core.Invalid(name, "not a valid name"))
		return ""
	}
	return v
}

func (q *query) integer(name string, def, lo, hi int) int {
	v := q.str(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		q.errs = append(q.errs, core.Invalid(name, fmt.Sprintf("must be a whole number from %d to %d", lo, hi)))
		return def
	}
	return n
}

func (q *query) optionalInt(name string, lo, hi int) *int {
	if q.str(name) == "" {
		return nil
	}
	n := q.integer(name, 0, lo, hi)
	return &n
}

func (q *query) oneOf(name, def string, allowed []string) string {
	v := q.str(name)
	if v == "" {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	q.errs = append(q.errs, core.Invalid(name, "must be one of "+strings.Join(allowed, ", ")))
	return def
}

func (q *query) err() error { return errors.Join(q.errs...) }
