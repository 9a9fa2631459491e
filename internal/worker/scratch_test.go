package worker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScratchDirsAreEmptyAndPrivate(t *testing.T) {
	s := scratchDirs{root: filepath.Join(t.TempDir(), "maxq-work")}
	a, err := s.take()
	require.NoError(t, err)
	b, err := s.take()
	require.NoError(t, err)
	require.NotEqual(t, a, b, "attempts running at once get directories of their own")
	info, err := os.Stat(a)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm())

	// a is left empty: kept for the next attempt. b is left with a file
	// in a subdirectory: removed.
	require.NoError(t, os.MkdirAll(filepath.Join(b, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(b, "sub", "f"), []byte("x"), 0o600))
	s.give(a)
	s.give(b)
	_, err = os.Stat(b)
	require.ErrorIs(t, err, os.ErrNotExist)

	c, err := s.take()
	require.NoError(t, err)
	require.Equal(t, a, c, "an empty directory is reused")
	d, err := s.take()
	require.NoError(t, err)
	entries, err := os.ReadDir(d)
	require.NoError(t, err)
	require.Empty(t, entries)

	// A script that changed its directory's mode does not pass it on.
	require.NoError(t, os.Chmod(c, 0o000))
	s.give(c)
	_, err = os.Stat(c)
	require.ErrorIs(t, err, os.ErrNotExist)

	s.give(d)
	s.close()
	left, err := os.ReadDir(s.root)
	require.NoError(t, err)
	require.Empty(t, left, "close removes the kept directories")
}
