package api

import (
	"context"
	"sync"
	"time"

	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/store"
)

// Bounds on how artifactWriter gathers artifacts.
const (
	// artifactBacklog is how many artifacts must wait for another writer
	// to start beside the ones running: one writer stores the most per
	// statement, and more are worth their smaller batches only when it
	// cannot keep up (measured: 16 to 32 waiting serve best).
	artifactBacklog = 16
	// maxArtifactWriters bounds the statements storing artifacts at once,
	// leaving the pool to the other endpoints.
	maxArtifactWriters = 4
	// maxArtifactBatch and maxArtifactBatchBytes bound one statement (the
	// first artifact of a batch always goes, however large).
	maxArtifactBatch      = 64
	maxArtifactBatchBytes = 4 << 20
	// artifactWriteTimeout bounds one statement, which runs on behalf of
	// many requests and so under none of their contexts.
	artifactWriteTimeout = time.Minute
)

// artifactWriter stores the artifacts that concurrent requests send in as
// few statements as it can: a request queues its artifact, and a writer
// goroutine takes whatever is queued and stores it with one statement
// (store.ArtifactsCreate), each artifact with its own answer, exactly as
// if it had been stored alone. A request never waits for a batch to fill:
// alone, it is stored at once; under load, artifacts gather while the
// statement before them runs, and one statement and one commit serve many
// — most of what an artifact costs PostgreSQL. When artifactBacklog
// artifacts wait, another writer starts, up to maxArtifactWriters.
type artifactWriter struct {
	store *store.Store

	mu      sync.Mutex
	queue   []*artifactWrite
	writers int // goroutines storing batches
}

// artifactWrite is one request's artifact and, once done is closed, its
// outcome.
type artifactWrite struct {
	params store.ArtifactCreateParams
	result store.ArtifactCreated
	done   chan struct{}
}

// create stores an artifact as store.ArtifactCreate does. When ctx ends
// first it returns ctx's error; the artifact may still be stored, as it may
// when a request's context ends while its statement commits.
func (w *artifactWriter) create(ctx context.Context, p store.ArtifactCreateParams) (core.Artifact, error) {
	op := &artifactWrite{params: p, done: make(chan struct{})}
	w.mu.Lock()
	w.queue = append(w.queue, op)
	if w.writers == 0 || len(w.queue) >= artifactBacklog && w.writers < maxArtifactWriters {
		w.writers++
		go w.write()
	}
	w.mu.Unlock()
	select {
	case <-op.done:
		return op.result.Artifact, op.result.Err
	case <-ctx.Done():
		return core.Artifact{}, ctx.Err()
	}
}

// write stores batches from the queue until it is empty.
func (w *artifactWriter) write() {
	for {
		batch := w.next()
		if batch == nil {
			return
		}
		ps := make([]store.ArtifactCreateParams, len(batch))
		for i, op := range batch {
			ps[i] = op.params
		}
		ctx, cancel := context.WithTimeout(context.Background(), artifactWriteTimeout)
		results := w.store.ArtifactsCreate(ctx, ps)
		cancel()
		for i, op := range batch {
			op.result = results[i]
			close(op.done)
		}
	}
}

// next takes the next batch off the queue, or returns nil and retires the
// calling writer when the queue is empty.
func (w *artifactWriter) next() []*artifactWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		w.writers--
		return nil
	}
	n, size := 1, len(w.queue[0].params.Value)
	for n < len(w.queue) && n < maxArtifactBatch {
		size += len(w.queue[n].params.Value)
		if size > maxArtifactBatchBytes {
			break
		}
		n++
	}
	batch := w.queue[:n:n]
	w.queue = w.queue[n:]
	if len(w.queue) == 0 {
		w.queue = nil // let the backing array go
	}
	return batch
}
