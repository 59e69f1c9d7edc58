package admission

import (
	"slices"
	"time"
)

// State returns a snapshot of the limiter (Position 0).
func (l *Limiter) State() State {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stateLocked(now, 0)
}

func (l *Limiter) stateLocked(now time.Time, pos int) State {
	hold := l.meanHold
	if hold == 0 && l.runningLocked() > 0 {
		// Nothing released yet: the mean age of the held slots is the best
		// measured lower bound of the hold time.
		hold = now.Sub(l.origin) - l.grantSum/time.Duration(l.runningLocked())
	}
	st := State{
		Now: now, Limit: l.b.limit, Running: l.runningLocked(), Queued: l.s.queue.n,
		Position: pos, MeanHold: hold, Draining: l.draining, Honoured: l.o.honouredNow(),
	}
	if (l.b.maxPrefill > 0 || l.b.costs.knowsPrefill()) && l.b.livePrefills(now) > 0 {
		st.Prefilling, st.PrefillAge = len(l.b.prefilling), now.Sub(l.b.prefilling[0].granted)
	}
	for _, t := range l.b.prefilling {
		st.PrefillTokens += t.est
	}
	st.ResidentKV = l.ResidentKV()
	return st
}

// Held returns how many waiters were held back, by reason (see
// HeldCounts).
func (l *Limiter) Held() HeldCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.b.held
	return HeldCounts{Cap: h[heldCount], Pacing: h[heldPacing], Prefill: h[heldPrefill], Step: h[heldStep], Reserved: h[heldReserve]}
}

// ClassStats is a snapshot of one class of the queue.
type ClassStats struct {
	Name    string
	Running int
	Queued  int
	// Granted counts slots granted; Shed the waiters displaced by a
	// request of higher priority or of a tenant under its share.
	Granted, Shed int64
}

// TenantStats is a snapshot of one tenant in one class.
type TenantStats struct {
	Class, Tenant   string
	Running, Queued int
	Granted         int64
	// Served is the weighted tokens served; VTC its virtual counter.
	Served, VTC float64
}

// Classes returns a snapshot of each class, in priority order.
func (l *Limiter) Classes() []ClassStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ClassStats, len(l.s.queue.classes))
	for i, cq := range l.s.queue.classes {
		out[i] = ClassStats{Name: cq.cfg.Name, Queued: cq.n, Granted: cq.granted, Shed: cq.shed}
	}
	for i, cq := range l.s.queue.classes {
		for f := range cq.busy {
			out[i].Running += f.running
		}
	}
	return out
}

// Tenants returns the n tenants (per class) that were served the most
// weighted tokens, most first, and the sum of all others under the tenant
// name "other" (last, when there are others). Tenant names are what the
// caller put in Request.Tenant.
func (l *Limiter) Tenants(n int) []TenantStats {
	l.mu.Lock()
	all := make([]TenantStats, 0, len(l.s.queue.flows))
	for _, f := range l.s.queue.flows {
		all = append(all, TenantStats{
			Class: l.s.queue.classes[f.key.class].cfg.Name, Tenant: f.key.tenant,
			Running: f.running, Queued: f.waiters.Len(), Granted: f.granted, Served: f.served, VTC: f.vtc,
		})
	}
	l.mu.Unlock()
	slices.SortFunc(all, func(a, b TenantStats) int {
		switch {
		case a.Served != b.Served:
			if a.Served > b.Served {
				return -1
			}
			return 1
		case a.Granted != b.Granted:
			return int(b.Granted - a.Granted)
		case a.Class != b.Class:
			if a.Class < b.Class {
				return -1
			}
			return 1
		case a.Tenant < b.Tenant:
			return -1
		case a.Tenant > b.Tenant:
			return 1
		}
		return 0
	})
	if len(all) <= n {
		return all
	}
	other := TenantStats{Class: "", Tenant: "other"}
	for _, t := range all[n:] {
		other.Running += t.Running
		other.Queued += t.Queued
		other.Granted += t.Granted
		other.Served += t.Served
	}
	return append(all[:n:n], other)
}

// DecisionState is State with TenantShort and TenantBounded set, in one hold of the lock:
// what the controller's loop reads once a decision. TenantShort walks the
// tenants with requests running or waiting (at most the cap plus the
// queue), which State, read for every finished request, does not, and
// starts the next period of the tenants' peaks.
func (l *Limiter) DecisionState() State {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stateLocked(now, 0)
	st.TenantShort, st.TenantBounded = l.s.queue.tenantShares(now)
	return st
}
