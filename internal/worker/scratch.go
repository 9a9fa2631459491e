package worker

import (
	"os"
	"sync"
)

// scratchDirs hands out the MAXQ_WORK_DIR of each script attempt: a
// directory of its own, empty when the script starts. On a journaling
// filesystem creating and removing a directory costs more than spawning a
// no-op script, so a directory that an attempt left empty is kept for a
// later one, and only one it left something in is removed.
type scratchDirs struct {
	root string
	mu   sync.Mutex
	free []string
}

// take returns an empty directory of its own.
func (s *scratchDirs) take() (string, error) {
	s.mu.Lock()
	if n := len(s.free); n > 0 {
		dir := s.free[n-1]
		s.free = s.free[:n-1]
		s.mu.Unlock()
		return dir, nil
	}
	s.mu.Unlock()
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(s.root, "attempt-")
}

// give takes a directory back once its script has ended: kept for reuse if
// empty (and still ours), removed otherwise.
func (s *scratchDirs) give(dir string) {
	if dir == "" {
		return
	}
	if f, err := os.Open(dir); err == nil {
		names, _ := f.Readdirnames(1)
		info, statErr := f.Stat()
		_ = f.Close()
		if len(names) == 0 && statErr == nil && info.Mode().Perm() == 0o700 {
			s.mu.Lock()
			s.free = append(s.free, dir)
			s.mu.Unlock()
			return
		}
	}
	_ = os.Chmod(dir, 0o700) // a script may have locked itself out
	_ = os.RemoveAll(dir)
}

// close removes the directories kept for reuse.
func (s *scratchDirs) close() {
	s.mu.Lock()
	free := s.free
	s.free = nil
	s.mu.Unlock()
	for _, dir := range free {
		_ = os.Remove(dir)
	}
}
