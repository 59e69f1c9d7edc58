package admission

import "time"

// scheduler answers who goes next: the priority classes, the tenants' fair
// shares within a class and FIFO within a tenant (the queue, fair.go), and
// the slots held back for refused requests' return (reservations,
// reserve.go). It holds no slot and no token: whether the request it names
// may start now is the budget's to say (budget.go), and the limiter
// (limiter.go) asks the two in turn. Guarded by the limiter's lock.
type scheduler struct {
	queue *fairQueue
	// Slots held back from lower classes for refused requests of higher
	// ones until they return, and the timer that wakes the queue when the
	// first of them ends.
	reserved     []reservation
	reserveTimer *time.Timer
	reserveAt    time.Time // when reserveTimer fires
}

func newScheduler(classes []ClassConfig, maxQueue int, f Fairness) scheduler {
	return scheduler{queue: newFairQueue(classes, max(maxQueue, 0), f)}
}

// mayJump reports whether a new request of flow f may start before anyone
// queued: nobody of its class or above waits, or it comes back to a slot
// its tenant holds reserved and is the next of its class in turn.
func (s *scheduler) mayJump(now time.Time, f *flow) bool {
	return s.queue.waitingAtOrAbove(f.key.class) == 0 || (s.ownReservation(now, f) && s.queue.first(f))
}

// enqueue queues w, displacing the waiter the queue's room rule names
// when the queue has no room for w; it returns that waiter (nil: none),
// which the caller refuses with ErrShed.
func (s *scheduler) enqueue(w *waiter) (shed *waiter) {
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
func (s *scheduler) granted(now time.Time, f *flow, class bool) float64 {
	s.queue.classes[f.key.class].since = now
	s.consume(now, f, class)
	return s.queue.charge(f)
}

// stop stops the reservation timer (draining).
func (s *scheduler) stop() {
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
func (s *scheduler) starved(now time.Time) *waiter {
	for i := 1; i < len(s.queue.classes); i++ {
		if cq := &s.queue.classes[i]; cq.n > 0 && now.Sub(cq.since) >= starveBound {
			return cq.next()
		}
	}
	return nil
}
