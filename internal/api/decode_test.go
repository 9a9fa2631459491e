package api

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzCheckJSONFastPath holds checkJSON's fast path to the token-by-token
// reading it stands in for: on any valid JSON text, jsonWithinLimits
// accepts exactly what checkJSONTokens does, so taking the fast path never
// changes an answer.
//
// The seeds run under plain go test; go test -fuzz=FuzzCheckJSONFastPath
// explores from them.
func FuzzCheckJSONFastPath(f *testing.F) {
	seeds := []string{
		`{}`, `[]`, `0`, `-0`, `"s"`, `true`, `null`,
		`{"stepId":"x","stepName":"a","sequence":0,"name":"n","value":{"articles":[1,2.5,-3e2]},"tags":["a"]}`,
		// NUL, and what only looks like it.
		`"a\u0000b"`, `{"\u0000":1}`, `"\\u0000"`, `"\\\u0000"`, `"\u00000"`, `"\u0001"`, `"\ud800"`, `"u0000"`,
		// Numbers at and beyond float64's range.
		`1e308`, `1.7976931348623157e308`, `1.8e308`, `1e309`, `-1e309`, `1e-400`, `1E+2`, `123456789012345`,
		`1234567890123456789012345678901234567890`, `-999999999999999999999`, strings.Repeat("9", 309),
		strings.Repeat("9", 310), `[1e999]`, `{"a":[0.1,1e400]}`,
		// Nesting at and beyond the limit.
		strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth),
		strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
		strings.Repeat(`{"a":`, maxJSONDepth) + "1" + strings.Repeat("}", maxJSONDepth),
		strings.Repeat(`{"a":`, maxJSONDepth+1) + "1" + strings.Repeat("}", maxJSONDepth+1),
		`"[[[[{{{{"`, strings.Repeat("[[]]", 100),
		// Not one valid JSON value: the fast path leaves these alone.
		`{} {}`, `{"a":`, "\xff", ``,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		slow := checkJSONTokens(data)
		if !utf8.Valid(data) || !json.Valid(data) {
			require.Equal(t, slow, checkJSON(data), "%q", data)
			return
		}
		require.Equal(t, slow == nil, jsonWithinLimits(data), "%q: %v", data, slow)
		require.Equal(t, slow == nil, checkJSON(data) == nil, "%q", data)
	})
}
