package admission

import "time"

// Precheck tells, without taking anything and without calling a hook,
// whether Acquire would refuse a request that came now for a reason the
// limiter alone decides: draining, or a full queue with no slot free. It
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
		cause, st = ErrDraining, l.stateLocked(now, l.queue.Len()+1)
	case l.queue.Len() >= l.maxQueue && !(l.queue.Len() == 0 && l.mayGrantLocked(now)):
		cause, st = ErrQueueFull, l.stateLocked(now, l.queue.Len()+1)
	}
	hooks := l.hooks
	l.mu.Unlock()
	if cause == nil {
		return nil
	}
	return l.reject(cause, hooks, req, st)
}
