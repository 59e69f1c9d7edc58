package admission

import "time"

// Precheck tells, without taking anything and without calling a hook,
// whether Acquire would refuse a request that came now for a reason the
// limiter alone decides: draining, or a full queue with no slot free and
// no waiter the request may displace. It
// returns the *RejectError Acquire would return, or nil. A gateway calls it
// with what the request's headers say, before reading its body, so that a
// request refused anyway does not upload its body first.
//
// The Gate's deadline verdict is not asked here: it counts demand for the
// controller, once per request, in Acquire. A nil answer promises nothing;
// Acquire decides again with the state it finds.
func (l *Limiter) Precheck(req Request) *RejectError {
	now := time.Now()
	l.mu.Lock()
	var cause error
	var st State
	switch {
	case l.draining:
		cause, st = ErrDraining, l.stateLocked(now, l.s.queue.n+1)
	case l.s.queue.n == 0 && l.slotFreeLocked(now):
	default:
		f := l.s.queue.flowFor(req.Class, req.Tenant)
		if _, ok := l.s.queue.room(f); !ok {
			cause, st = ErrQueueFull, l.stateLocked(now, l.s.queue.position(f))
		}
	}
	hooks := l.hooks
	l.mu.Unlock()
	if cause == nil {
		return nil
	}
	return l.reject(cause, hooks, req, st)
}
