package api

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/maxq-dev/maxq/internal/store"
)

// watchInterval is how often the watcher looks at the runs someone waits on.
const watchInterval = 250 * time.Millisecond

// watcher serves long polls (GET /runs/{id}?waitForChangeMs=): however many
// requests wait, one query per interval reads the versions of all the runs
// they wait on, so a hundred CI jobs waiting cost about what one does.
type watcher struct {
	store  *store.Store
	logger *slog.Logger

	mu      sync.Mutex
	waiters map[*waiter]struct{}
	running bool
}

type waiter struct {
	runID   string
	version string
	changed chan struct{}
}

func newWatcher(s *store.Store, logger *slog.Logger) *watcher {
	return &watcher{store: s, logger: logger, waiters: map[*waiter]struct{}{}}
}

// wait returns when run runID's version differs from version, or when ctx
// is done.
func (w *watcher) wait(ctx context.Context, runID, version string) {
	wt := &waiter{runID: runID, version: version, changed: make(chan struct{})}
	w.mu.Lock()
	w.waiters[wt] = struct{}{}
	if !w.running {
		w.running = true
		go w.loop()
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiters, wt)
		w.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
	case <-wt.changed:
	}
}

// loop polls while anyone waits, and ends when no one does.
func (w *watcher) loop() {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for range t.C {
		w.mu.Lock()
		if len(w.waiters) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		ids := map[string]bool{}
		for wt := range w.waiters {
			ids[wt.runID] = true
		}
		w.mu.Unlock()
		list := make([]string, 0, len(ids))
		for id := range ids {
			list = append(list, id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		versions, err := w.store.RunVersions(ctx, list)
		cancel()
		if err != nil {
			w.logger.Warn("watch runs", "err", err)
			continue
		}
		w.mu.Lock()
		for wt := range w.waiters {
			if v, ok := versions[wt.runID]; !ok || v != wt.version {
				close(wt.changed)
				delete(w.waiters, wt)
			}
		}
		w.mu.Unlock()
	}
}
