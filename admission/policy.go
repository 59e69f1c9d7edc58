package admission

import "time"

// policy answers who goes next: the queue's order (queue.go: priority
// classes, the tenants' fair shares within a class, FIFO within a
// tenant), bounded by the starvation bound, and the slots held back for
// refused requests' return (reservations, reserve.go). It holds no slot
// and no token: whether the request it names may start now is the
// budget's to say (budget.go), and the grant (grant.go) asks the two in
// turn. Guarded by the limiter's lock.
type policy struct {
	queue *fairQueue
	// Slots held back from lower classes for refused requests of higher
	// ones until they return, and the timer that wakes the queue when the
	// first of them ends.
	reserved     []reservation
	reserveTimer *time.Timer
	reserveAt    time.Time // when reserveTimer fires
}

func newPolicy(classes []ClassConfig, maxQueue int, f Fairness) policy {
	return policy{queue: newFairQueue(classes, max(maxQueue, 0), f)}
}

// arrival reports whether a new request of flow f, refused back times
// before, may start before anyone queued (jump): nobody of its class or
// above waits, or it comes back to a slot its tenant holds reserved and is
// the next of its class in turn, or it comes back after a refusal and no
// request come back waits at its class or above (those that come for the
// first time wait behind it); and if so the slots held back from it
// (held: see heldFor).
func (s *policy) arrival(now time.Time, f *flow, back int) (jump bool, held int) {
	switch {
	case s.queue.waitingAtOrAbove(f.key.class) == 0, s.ownReservation(now, f) && s.queue.first(f):
		return true, s.heldFor(now, f)
	case back > 0 && s.queue.returnsAtOrAbove(f.key.class) == 0:
		return true, s.heldFor(now, f)
	}
	return false, 0
}

// next names the waiter the next slot goes to, and the slots held back
// from it: the queue's next (see fairQueue.next), or, before it, the next
// waiter of a class starved for starveBound, from which nothing is held
// back. Call it only while someone waits.
func (s *policy) next(now time.Time) (w *waiter, held int) {
	if a := s.starved(now); a != nil {
		return a, 0 // before the higher classes and what is held for them
	}
	w = s.queue.next()
	return w, s.heldFor(now, w.flow)
}

// behind returns up to n waiters after w in the order the policy would
// grant them if w and each before them were gone: classes in priority
// order, within a class the flows in the order of their counters, each
// flow's waiters in its order (come back first, then FIFO). The
// starvation bound is not weighed: a backfill (see Limiter.backfillLocked)
// takes a slot the head cannot use now.
func (s *policy) behind(w *waiter, n int) []*waiter {
	return s.queue.behind(w, n)
}

// enqueue queues w, displacing the waiter the queue's room rule names
// when the queue has no room for w; it returns that waiter (nil: none),
// which the caller refuses with ErrShed.
func (s *policy) enqueue(w *waiter) (shed *waiter) {
	if v, _ := s.queue.room(w.flow); v != nil {
		s.queue.remove(v)
		s.queue.classes[v.flow.key.class].shed++
		shed = v
	}
	s.queue.push(w)
	return shed
}

// granted counts a grant to flow f and returns what it charged its fair
// share: it ends a reservation of f (its own, or with class its class's)
// and charges the flow (see fairQueue.charge).
func (s *policy) granted(now time.Time, f *flow, class bool) float64 {
	s.queue.classes[f.key.class].since = now
	s.consume(now, f, class)
	return s.queue.charge(f)
}

// stop stops the reservation timer (draining).
func (s *policy) stop() {
	if s.reserveTimer != nil {
		s.reserveTimer.Stop()
		s.reserveTimer = nil
	}
}

// starveBound is the longest a class with waiters goes without a grant
// while higher classes take every slot: its next waiter is then the next
// granted, before the higher classes' waiters and the slots held back for
// them. Strict priority serves a lower class only what the higher ones
// leave free, which under their sustained demand is nothing (scenario 14:
// sixteen chat users hold the engine at its knee, and 64 batch users
// would wait the whole run); a batch job makes progress, at one request
// in every starveBound, a share of a percent of the slots.
const starveBound = 5 * time.Minute

// starved returns the next waiter of the highest class that has waited
// starveBound without a grant, or nil.
func (s *policy) starved(now time.Time) *waiter {
	for i := 1; i < len(s.queue.classes); i++ {
		if cq := &s.queue.classes[i]; cq.n > 0 && now.Sub(cq.since) >= starveBound {
			return cq.next()
		}
	}
	return nil
}
