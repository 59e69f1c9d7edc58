package admission

import "time"

// Refusals: how a request the grant (grant.go) did not take is refused,
// what it is told (its Retry-After) and what the policy keeps for its
// return (a reservation). Every refusal is a *RejectError built by reject.

// enqueueLocked queues w; a waiter it displaces is refused with ErrShed.
func (l *Limiter) enqueueLocked(now time.Time, w *waiter) {
	if v := l.s.enqueue(w); v != nil {
		v.err, v.state = ErrShed, l.stateLocked(now, l.s.queue.position(v.flow))
		close(v.ready)
	}
}

// refuseLocked refuses a waiter taken off the queue with cause and state,
// after prev (nil: the first refused in this pass), and returns it as the
// next one's prev. The Refused hook is what tells each its Retry-After,
// and the controller's answer depends on the answers before it (it sends
// each refused request to a later release): waiters woken at one instant
// run in no fixed order, so each one's hook waits for the one refused
// before it, and the answers follow the queue's order, not the policy's.
func (l *Limiter) refuseLocked(w, prev *waiter, cause error, st State) *waiter {
	w.err, w.state = cause, st
	w.done = make(chan struct{})
	if prev != nil {
		w.turn = prev.done
	}
	close(w.ready)
	return w
}

// reject builds a rejection; call it without the lock held.
// A refused request of a higher class has a slot reserved for its return
// (see policy.reserve).
func (l *Limiter) reject(cause error, h Hooks, req Request, st State) *RejectError {
	re := &RejectError{Err: cause, RetryAfter: l.retryAfter(h, req, st), State: st}
	l.noteRefusal(re, req)
	return re
}

// retryAfter asks the hook, then the built-in estimate, then falls back to
// the queue-wait bound when nothing has been measured yet.
func (l *Limiter) retryAfter(h Hooks, req Request, s State) time.Duration {
	if h.Refuser != nil {
		if d := h.Refuser.Refused(req, s); d > 0 {
			return l.boundRetry(d)
		}
	}
	if d := EstimateRetryAfter(s); d > 0 {
		return l.boundRetry(d)
	}
	return l.boundRetry(max(req.MaxWait, 0))
}

// boundRetry bounds a Retry-After by Config.MaxRetryAfter.
func (l *Limiter) boundRetry(d time.Duration) time.Duration {
	if l.maxRetry > 0 {
		return min(d, l.maxRetry)
	}
	return d
}

// noteRefusal reserves a slot for a refused request's return (see
// policy.reserve); call it without the lock held. A tenant under its share
// goes before the tenants it holds the slot back from, so its wait is
// for the next slot free for it: its Retry-After is at most the
// limiter's own estimate of that (EstimateRetryAfter at the place after
// the slots already held back for it or for others before it).
func (l *Limiter) noteRefusal(re *RejectError, req Request) {
	if re.Err == ErrDraining {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tallyLocked(now)
	q := l.s.queue
	defer func() {
		l.o.refused(now, req.Fingerprint, max(req.PromptTokens, 0), req.refusals, req.Retries, req.since, re.RetryAfter)
	}()
	f := q.flows[flowKey{q.classOf(req.Class), req.Tenant}]
	if f == nil {
		return // forgotten (too many tenants): nothing to reserve for
	}
	// It has a request away, due back: it asks for more than it runs.
	f.away = later(f.away, now.Add(re.RetryAfter+time.Second+reserveGrace))
	if f.running == 0 && f.waiters.Len() == 0 {
		cq := &q.classes[f.key.class]
		cq.idleAway = later(cq.idleAway, f.away)
	}
	tenant, ahead := l.s.refused(now, f)
	if tenant {
		pos := max(1, ahead+1-(l.b.limit-l.runningLocked()))
		if d := EstimateRetryAfter(l.stateLocked(now, pos)); d > 0 {
			re.RetryAfter = min(re.RetryAfter, d)
		}
	}
	l.s.reserve(now, f, tenant, re.RetryAfter, l.b.limit)
}
