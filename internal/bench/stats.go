package bench

import (
	"context"
	"math"
	"slices"
	"time"
)

// samples are measurements in one unit (milliseconds, mostly).
type samples []float64

// pct is the p-th percentile (0 < p ≤ 100) by nearest rank, or NaN when
// there are no samples.
func (s samples) pct(p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	sorted := slices.Sorted(slices.Values(s))
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func (s samples) mean() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, v := range s {
		sum += v
	}
	return sum / float64(len(s))
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// ms converts a duration to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// perSecond is n events over the span between two epoch-millisecond times.
func perSecond(n int, fromMs, toMs int64) float64 {
	if toMs <= fromMs {
		return math.NaN()
	}
	return float64(n) / (float64(toMs-fromMs) / 1000)
}

// span returns the earliest start and the latest end of the steps.
func span(steps []stepRow) (first, last int64) {
	first, last = math.MaxInt64, 0
	for _, s := range steps {
		if s.StartedAt != nil {
			first = min(first, *s.StartedAt)
		}
		if s.CompletedAt != nil {
			last = max(last, *s.CompletedAt)
		}
	}
	return first, last
}
