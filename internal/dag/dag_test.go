package dag

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCycle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		deps map[string][]string
		want string
	}{
		{"Empty", map[string][]string{}, ""},
		{"Independent", map[string][]string{"a": nil, "b": nil}, ""},
		{"Chain", map[string][]string{"a": nil, "b": {"a"}, "c": {"b", "a"}}, ""},
		{"EarlierStage", map[string][]string{"b": {"a"}}, ""},
		{"Self", map[string][]string{"a": {"a"}}, "a → a"},
		{"Two", map[string][]string{"a": {"b"}, "b": {"a"}}, "a → b → a"},
		{"Three", map[string][]string{"a": {"c"}, "b": {"a"}, "c": {"b"}, "d": nil}, "a → c → b → a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Cycle(tt.deps))
		})
	}
}

func TestUnknown(t *testing.T) {
	t.Parallel()
	deps := map[string][]string{"b": {"a", "x"}, "c": {"b", "y"}}
	require.Equal(t, []string{"b: x", "c: y"}, Unknown(deps, map[string]bool{"a": true}))
	require.Empty(t, Unknown(map[string][]string{"b": {"a"}}, map[string]bool{"a": true}))
}
