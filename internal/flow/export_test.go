package flow

import "time"

// SetNow sets the clock a Cache reads, so tests move time without sleeping.
func SetNow(c *Cache, now func() time.Time) { c.now = now }
