package admission

import (
	"math"
	"time"
)

// tenantShares reports, for the controller (see State.TenantShort and
// TenantBounded), how the running requests of each class compare with
// its tenants' demand. A tenant is bounded when it runs every request it
// has: none waits and none it was refused is away, due back (by its
// Retry-After and a second). Of the bounded tenants, counted at the most
// they ran since the last call (when one of their requests ended and the
// next had not come, they run one fewer for a moment):
//   - short: one runs fewer than its weighted share of its class's
//     running requests, beside other tenants;
//   - bounded: one runs no more than every tenant of its class that has
//     more demand than it runs (waiting, or away and due back), so that a
//     slot more would go to a tenant no worse off than it.
//
// The fair queue cannot serve such a tenant more: only fewer running
// requests, each streaming faster, can. Whether there is demand beyond
// the cap is the controller's to judge. Each call starts the next period
// of peaks.
func (q *fairQueue) tenantShares(now time.Time) (short, bounded bool) {
	for i := range q.classes {
		cq := &q.classes[i]
		running, weight := 0, 0.0
		unmet := math.MaxInt // the fewest running of a tenant with more demand than it runs
		if cq.idleAway.After(now) {
			unmet = 0 // a tenant refused with nothing running is due back
		}
		for f := range cq.busy {
			running += f.running
			weight += f.weight
			if f.waiters.Len() > 0 || f.away.After(now) {
				unmet = min(unmet, f.running)
			}
		}
		for f := range cq.busy {
			peak := max(f.peak, f.running)
			f.peak = f.running
			if len(cq.busy) < 2 || f.waiters.Len() > 0 || f.away.After(now) || f.running == 0 {
				continue
			}
			short = short || float64(peak) < float64(running)*f.weight/weight
			bounded = bounded || (unmet < math.MaxInt && peak <= unmet)
		}
	}
	return short, bounded
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
