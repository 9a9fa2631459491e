package auth

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokens(t *testing.T) {
	t.Parallel()
	check := func(tok Tokens, header string) (Caller, bool) {
		r := httptest.NewRequest("GET", "/", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		return tok.Check(r)
	}

	off := New("")
	c, ok := check(off, "")
	require.True(t, ok)
	require.True(t, c.Admin)
	require.Empty(t, off.RunToken("r1"))

	on := New("a-very-secret-token")
	for _, h := range []string{"", "Bearer", "Bearer wrong", "Basic a-very-secret-token", "a-very-secret-token",
		"Bearer mxq_run.r1.forged", "Bearer mxq_run.", "Bearer mxq_run.r1"} {
		_, ok := check(on, h)
		require.False(t, ok, h)
	}
	c, ok = check(on, "Bearer a-very-secret-token")
	require.True(t, ok)
	require.True(t, c.Admin)
	c, ok = check(on, "bearer "+on.RunToken("r1"))
	require.True(t, ok)
	require.Equal(t, Caller{RunID: "r1"}, c)

	// A token of one run does not name another, and another API token's
	// run tokens are not valid here.
	tok := on.RunToken("r1")
	last := "x"
	if tok[len(tok)-1] == 'x' {
		last = "y"
	}
	_, ok = check(on, "Bearer "+tok[:len(tok)-1]+last)
	require.False(t, ok)
	_, ok = check(on, "Bearer "+New("another-secret-token").RunToken("r1"))
	require.False(t, ok)
	require.NotContains(t, tok, "a-very-secret-token")
}
