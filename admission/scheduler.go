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
func (s *scheduler) granted(f *flow, class bool) float64 {
	s.consume(f, class)
	return s.queue.charge(f)
}

// stop stops the reservation timer (draining).
func (s *scheduler) stop() {
	if s.reserveTimer != nil {
		s.reserveTimer.Stop()
		s.reserveTimer = nil
	}
}
