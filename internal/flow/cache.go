package flow

import (
	"slices"
	"sync"
	"time"
)

// DefaultCacheTTL is how long a Cache trusts a flow it found.
const DefaultCacheTTL = time.Second

// Cache is a Catalog for a server that looks flows up on every request: it
// remembers each usable flow it finds for a TTL, so that a look-up costs
// no system call instead of a few per step of the flow (Catalog.Flow
// stats every step's directory and script).
//
// What it remembers is only ever "this flow, with these steps, was
// usable": a flow that is not found or not usable, or a step the flow
// lacks, is looked for on disk again at once. So a flow or step added (or
// fixed) under FLOWS_ROOT can be used at once, as with Catalog; one removed
// or broken is noticed within the TTL. Until then it is accepted — as it
// would be had it changed just after being looked at: a script is checked
// again when a worker runs it, and a missing one fails its step or run
// there.
//
// The zero value is not usable; make one with NewCache. It is safe for
// concurrent use.
type Cache struct {
	catalog Catalog
	ttl     time.Duration
	now     func() time.Time

	mu    sync.Mutex
	flows map[string]cachedFlow
}

type cachedFlow struct {
	flow Flow
	at   time.Time
}

// NewCache returns a cache of c's flows trusted for ttl (DefaultCacheTTL
// when 0 or less).
func NewCache(c Catalog, ttl time.Duration) *Cache {
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	return &Cache{catalog: c, ttl: ttl, now: time.Now, flows: map[string]cachedFlow{}}
}

// Flow returns the named flow as Catalog.Flow does, as found at most the
// TTL ago — unless that lacks one of steps, in which case the flow is read
// again: a step added since is then found. The Flow's Steps are shared:
// read them, do not change them.
func (c *Cache) Flow(name string, steps ...string) (Flow, error) {
	now := c.now()
	c.mu.Lock()
	cached, ok := c.flows[name]
	c.mu.Unlock()
	if ok && now.Sub(cached.at) < c.ttl && hasAll(cached.flow, steps) {
		return cached.flow, nil
	}
	f, err := c.catalog.Flow(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(c.flows, name)
		return Flow{}, err
	}
	c.flows[name] = cachedFlow{flow: f, at: now}
	return f, nil
}

// hasAll reports whether f has every one of steps (f.Steps is sorted).
func hasAll(f Flow, steps []string) bool {
	for _, s := range steps {
		if _, found := slices.BinarySearch(f.Steps, s); !found {
			return false
		}
	}
	return true
}
