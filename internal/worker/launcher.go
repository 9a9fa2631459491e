package worker

import "sync"

// launchers is how many scripts the launcher starts at once. One is too
// few: a start is more than its fork (the scratch directory, the
// environment, the pipes), and one start at a time spaces out short steps
// so much that their outcomes and the claims that follow them are written
// in far smaller batches. A few overlap all that with the forks, which
// syscall.ForkLock serializes anyway, without a goroutine (and perhaps a
// thread) per step when hundreds are claimed at once.
const launchers = 4

// launcher starts step scripts in the background, so that whoever starts a
// step (the claim loop) returns at once rather than waiting for forks and
// execs. Its goroutines run only while some wait to be started.
type launcher struct {
	mu      sync.Mutex
	queue   []func()
	running int // goroutines working through queue
}

// add queues a start.
func (l *launcher) add(start func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = append(l.queue, start)
	if l.running < launchers {
		l.running++
		go l.run()
	}
}

// run starts what is queued, until nothing is.
func (l *launcher) run() {
	for {
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.running--
			if l.running == 0 {
				l.queue = nil // let a burst's backing array go
			}
			l.mu.Unlock()
			return
		}
		start := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.mu.Unlock()
		start()
	}
}
