package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// extract returns the part of the JSON value raw at path, a jq-style path
// of keys and indexes: ".", ".a.b", ".a[0]", "[2].id", `.["odd key"]`,
// ".items[-1]" (from the end). Numbers keep their exact text.
func extract(raw json.RawMessage, path string) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the value is not valid JSON: %w", err)
	}
	segs, err := parsePath(path)
	if err != nil {
		return nil, err
	}
	at := ""
	for _, s := range segs {
		switch x := v.(type) {
		case map[string]any:
			if s.key == nil {
				return nil, fmt.Errorf("field %s: %s is an object, not an array", path, where(at))
			}
			val, ok := x[*s.key]
			if !ok {
				return nil, fmt.Errorf("field %s: %s has no key %q", path, where(at), *s.key)
			}
			v = val
		case []any:
			if s.key != nil {
				return nil, fmt.Errorf("field %s: %s is an array, not an object", path, where(at))
			}
			i := s.index
			if i < 0 {
				i += len(x)
			}
			if i < 0 || i >= len(x) {
				return nil, fmt.Errorf("field %s: %s has %d elements, no [%d]", path, where(at), len(x), s.index)
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("field %s: %s is %s, not an object or array", path, where(at), typeName(v))
		}
		at += s.String()
	}
	return v, nil
}

func where(at string) string {
	if at == "" {
		return "the value"
	}
	return at
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// pathSeg is one step of a path: a key, or an index when key is nil.
type pathSeg struct {
	key   *string
	index int
}

func (s pathSeg) String() string {
	if s.key == nil {
		return "[" + strconv.Itoa(s.index) + "]"
	}
	if plainKey(*s.key) {
		return "." + *s.key
	}
	b, _ := json.Marshal(*s.key)
	return "[" + string(b) + "]"
}

func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// parsePath splits a path into its segments.
func parsePath(path string) ([]pathSeg, error) {
	bad := func(why string) error {
		return fmt.Errorf("field %q: %s (e.g. .a.b, .items[0], .[\"odd key\"])", path, why)
	}
	p := strings.TrimSpace(path)
	if p == "" || p == "." {
		return nil, nil
	}
	if p[0] != '.' && p[0] != '[' {
		return nil, bad("a path starts with . or [")
	}
	var segs []pathSeg
	for len(p) > 0 {
		switch {
		case strings.HasPrefix(p, ".["):
			p = p[1:]
		case p[0] == '.':
			p = p[1:]
			if strings.HasPrefix(p, `"`) {
				end := quotedEnd(p)
				var key string
				if end < 0 || json.Unmarshal([]byte(p[:end]), &key) != nil {
					return nil, bad("bad quoted key")
				}
				segs = append(segs, pathSeg{key: &key})
				p = p[end:]
				continue
			}
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			key := p[:end]
			if key == "" {
				return nil, bad("empty key")
			}
			segs = append(segs, pathSeg{key: &key})
			p = p[end:]
		case p[0] == '[':
			end, err := closing(p)
			if err != nil {
				return nil, bad(err.Error())
			}
			inner := strings.TrimSpace(p[1:end])
			p = p[end+1:]
			if strings.HasPrefix(inner, `"`) {
				var key string
				if err := json.Unmarshal([]byte(inner), &key); err != nil {
					return nil, bad("bad quoted key " + inner)
				}
				segs = append(segs, pathSeg{key: &key})
				continue
			}
			n, err := strconv.Atoi(inner)
			if err != nil {
				return nil, bad("an index must be a whole number, not " + strconv.Quote(inner))
			}
			segs = append(segs, pathSeg{index: n})
		default:
			return nil, bad("unexpected " + strconv.Quote(p[:1]))
		}
	}
	return segs, nil
}

// quotedEnd returns the index just past the JSON string that starts p, or
// -1.
func quotedEnd(p string) int {
	for i := 1; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// closing finds the ] that closes the [ at p[0], skipping a quoted key.
func closing(p string) (int, error) {
	inQuote, escaped := false, false
	for i := 1; i < len(p); i++ {
		c := p[i]
		switch {
		case escaped:
			escaped = false
		case inQuote && c == '\\':
			escaped = true
		case c == '"':
			inQuote = !inQuote
		case c == ']' && !inQuote:
			return i, nil
		}
	}
	return 0, errors.New("unclosed [")
}

// marshalNoEscape is json.Marshal without escaping <, > and &.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
