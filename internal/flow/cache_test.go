package flow_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/flow"
)

// newCache returns a cache of root's flows trusting them for a second, and
// the function that moves its clock on.
func newCache(root string) (*flow.Cache, func(time.Duration)) {
	c := flow.NewCache(flow.Catalog{Root: root}, time.Second)
	now := time.Unix(1_700_000_000, 0)
	flow.SetNow(c, func() time.Time { return now })
	return c, func(d time.Duration) { now = now.Add(d) }
}

// What is added or fixed on disk is seen at once; what is removed or
// broken, within the TTL, and not before.
func TestCache(t *testing.T) {
	t.Parallel()

	t.Run("AddedAtOnce", func(t *testing.T) {
		t.Parallel()
		root := build(t, map[string]os.FileMode{"a/flow.sh": 0o755, "a/steps/one/step.sh": 0o755})
		c, _ := newCache(root)
		f, err := c.Flow("a", "one")
		require.NoError(t, err)
		require.Equal(t, []string{"one"}, f.Steps)
		_, err = c.Flow("b")
		require.ErrorIs(t, err, core.ErrNotFound)

		add(t, root, "a/steps/two/step.sh", 0o755)
		add(t, root, "b/flow.sh", 0o755)
		f, err = c.Flow("a", "one", "two")
		require.NoError(t, err)
		require.Equal(t, []string{"one", "two"}, f.Steps)
		_, err = c.Flow("b")
		require.NoError(t, err)
		// A step still missing is missing after a fresh look.
		f, err = c.Flow("a", "three")
		require.NoError(t, err)
		require.Equal(t, []string{"one", "two"}, f.Steps)
	})
	t.Run("FixedAtOnce", func(t *testing.T) {
		t.Parallel()
		root := build(t, map[string]os.FileMode{"a/flow.sh": 0o644, "a/steps/one/step.sh": 0o644})
		c, _ := newCache(root)
		_, err := c.Flow("a")
		require.EqualError(t, err, `flow "a" not found: flow.sh is not executable`)
		require.NoError(t, os.Chmod(filepath.Join(root, "a", "flow.sh"), 0o755))
		f, err := c.Flow("a", "one")
		require.NoError(t, err)
		require.Empty(t, f.Steps)
		require.NoError(t, os.Chmod(filepath.Join(root, "a", "steps", "one", "step.sh"), 0o755))
		f, err = c.Flow("a", "one")
		require.NoError(t, err)
		require.Equal(t, []string{"one"}, f.Steps)
	})
	t.Run("RemovedWithinTTL", func(t *testing.T) {
		t.Parallel()
		root := build(t, map[string]os.FileMode{
			"a/flow.sh": 0o755, "a/steps/one/step.sh": 0o755, "a/steps/two/step.sh": 0o755,
			"b/flow.sh": 0o755,
		})
		c, later := newCache(root)
		want, err := c.Flow("a")
		require.NoError(t, err)
		_, err = c.Flow("b")
		require.NoError(t, err)

		require.NoError(t, os.RemoveAll(filepath.Join(root, "a", "steps", "two")))
		require.NoError(t, os.Chmod(filepath.Join(root, "b", "flow.sh"), 0o644))
		later(999 * time.Millisecond)
		f, err := c.Flow("a", "two")
		require.NoError(t, err, "trusted until the TTL has passed")
		require.Equal(t, want, f)
		_, err = c.Flow("b")
		require.NoError(t, err)

		later(time.Millisecond)
		f, err = c.Flow("a", "two")
		require.NoError(t, err)
		require.Equal(t, []string{"one"}, f.Steps)
		_, err = c.Flow("b")
		require.ErrorIs(t, err, core.ErrNotFound)
		// Fixed again: seen at once, though the failure was just seen.
		require.NoError(t, os.Chmod(filepath.Join(root, "b", "flow.sh"), 0o755))
		_, err = c.Flow("b")
		require.NoError(t, err)
	})
	t.Run("InvalidNames", func(t *testing.T) {
		t.Parallel()
		c, _ := newCache(build(t, map[string]os.FileMode{"a/flow.sh": 0o755}))
		for _, name := range []string{"../a", "", ".a", "a/steps"} {
			_, err := c.Flow(name)
			require.ErrorIs(t, err, core.ErrInvalid, name)
		}
	})
}

// BenchmarkFlowLookUp compares a look-up of a flow of 200 steps on disk
// with one the cache answers.
func BenchmarkFlowLookUp(b *testing.B) {
	tree := map[string]os.FileMode{"big/flow.sh": 0o755}
	for i := range 200 {
		tree[filepath.Join("big/steps", "s"+string(rune('a'+i%26))+string(rune('a'+i/26)), "step.sh")] = 0o755
	}
	root := b.TempDir()
	for path, mode := range tree {
		add(b, root, path, mode)
	}
	b.Run("Catalog", func(b *testing.B) {
		c := flow.Catalog{Root: root}
		for b.Loop() {
			if _, err := c.Flow("big"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Cache", func(b *testing.B) {
		c := flow.NewCache(flow.Catalog{Root: root}, time.Second)
		for b.Loop() {
			if _, err := c.Flow("big", "saa", "sza"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
