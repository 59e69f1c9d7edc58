package admission

import "time"

// The grant: every slot the limiter grants is decided in this file, and
// every decision reads the same way, top to bottom:
//
//  1. who: the policy (policy.go) names the request that goes next and
//     counts the slots held back from it (reservations for refused
//     requests' return); asked once;
//  2. whether: the budget (budget.go) says whether that request fits now
//     (the cap, pacing, the slots held back, its prefill against the TTFT
//     deadlines, the decode step against the TPOT targets), and if not
//     why; asked once;
//  3. grantLocked: the policy counts the grant (a reservation it ends,
//     the tenant's fair share), the budget takes the ticket.
//
// Three paths ask, each for its own reason:
//
//   - arriveLocked: a new request (Acquire). It goes before the queue
//     only when the policy lets it (nobody of its class or above waits,
//     or it is a refused request come back to its reservation); else it
//     queues (the queue, queue.go, says whether there is room).
//   - wakeLocked: the queue, after anything that may have made room (a
//     release, a first token, a new cap, pacing or costs, a timer, a
//     waiter that left). A waiter that fits but whose prefill would now
//     end past its TTFT deadline is refused (queue_timeout) and the slot
//     goes to the next. A head held by the token budget lets the first
//     waiter behind it that fits go (backfillLocked): the budget is asked
//     again for it.
//   - expireLocked: a waiter at its queue-wait bound. At the head of the
//     queue and held only by pacing, it is granted: pacing defers a
//     prefill to spare the one under way, it does not refuse.
//
// The timers that wake the queue (the end of the oldest prefill's bound
// under pacing, the end of the first reservation) are armed here too, by
// the wake that found the queue held for that reason.

// arriveLocked decides for a request that has just come: granted at once
// (t), refused (cause, with the state that explains it), or queued
// (queue, with st the state at the place it would take). It never calls a
// hook: hooks run without the lock (see reject).
func (l *Limiter) arriveLocked(now, start time.Time, req Request) (t *Ticket, cause error, st State, queue bool) {
	if l.draining {
		return nil, ErrDraining, l.stateLocked(now, l.s.queue.n+1), false
	}
	f := l.s.queue.flowFor(req.Class, req.Tenant)
	c := candidateOf(req)
	if l.b.overPrefillTokens(now, c.prompt, l.s.queue.tokens) {
		return nil, ErrQueueFull, l.stateLocked(now, l.s.queue.position(f)), false
	}
	if jump, held := l.s.arrival(now, f, c.back); jump {
		if ok, _ := l.b.fits(now, c, l.runningLocked(), l.ResidentKV(), held, true); ok {
			// Perhaps a refused request come back: its reservation ends.
			// (A tenant's slot held back from the waiters it goes before
			// is its own to take, see policy.reserve.)
			return l.grantLocked(now, start, f, c, true), nil, State{}, false
		}
	}
	st = l.stateLocked(now, l.s.queue.position(f))
	st.PrefillWait = l.b.prefillWait(now, l.runningLocked(), l.ResidentKV())
	if l.b.costs.knowsPrefill() {
		st.PrefillOwn = l.b.costs.prefillOf(c.prompt, l.b.costs.StepWith(l.runningLocked(), l.ResidentKV(), c.prompt))
	}
	if _, ok := l.s.queue.room(f); !ok {
		return nil, ErrQueueFull, st, false
	}
	return nil, nil, st, true
}

// wakeLocked grants slots to waiters, in the policy's order, while the
// budget has room for the next. When waiters are held only by pacing or
// by reservations, it arms the timer for when that ends.
func (l *Limiter) wakeLocked(now time.Time) {
	var prev *waiter
	for l.s.queue.n > 0 {
		w, held := l.s.next(now)
		if ok, why := l.b.fits(now, w.cand, l.runningLocked(), l.ResidentKV(), held, true); !ok {
			l.b.hold(w, why)
			if w = l.backfillLocked(now, w, why); w == nil {
				break
			}
		}
		l.s.queue.remove(w)
		if l.b.late(now, w.cand, l.runningLocked(), l.ResidentKV()) {
			// It would miss its deadline from here: refused at once (as
			// at its queue-wait bound), leaving the slot to the next.
			prev = l.refuseLocked(w, prev, ErrQueueTimeout, l.stateLocked(now, 1))
			continue
		}
		w.ticket = l.grantLocked(now, w.enqueued, w.flow, w.cand, false) // a tenant's refused request come back and queued
		w.ticket.held = HoldReasons(w.held)
		close(w.ready)
	}
	l.armPaceLocked(now)
	l.armReserveLocked(now)
}

// backfillDepth is how many waiters behind a held head the wake looks at
// for one that fits.
const backfillDepth = 8

// backfillLocked returns the first of the waiters behind head (in the
// policy's order, at most backfillDepth) that fits now, when head is held
// by the token budget (its prefill against the TTFT deadlines, or the
// decode step) rather than by the cap, pacing or a reservation; else nil.
// The engine has room then, just not for head (a 6,000-token prompt
// behind prefills under way): one that fits starts, and head keeps its
// place. Without it, the head of the line held the slots those behind it
// would have used (scenario 16: chat turns behind a retrieval prompt) and
// the requests refused meanwhile left them idle. A head that cannot meet
// its deadline is refused when it would start late (see late), as before.
func (l *Limiter) backfillLocked(now time.Time, head *waiter, why int) *waiter {
	if why != heldPrefill && why != heldStep {
		return nil
	}
	for _, w := range l.s.behind(head, backfillDepth) {
		if ok, _ := l.b.fits(now, w.cand, l.runningLocked(), l.ResidentKV(), l.s.heldFor(now, w.flow), true); ok {
			return w
		}
	}
	return nil
}

// expireLocked decides for a waiter whose queue-wait bound has passed: it
// is granted a slot (t) when it is the next in the queue and held only by
// pacing, and otherwise leaves the queue (left) with st, the state that
// explains its refusal; neither when a grant or a refusal raced in (the
// caller owns w's outcome).
func (l *Limiter) expireLocked(w *waiter) (t *Ticket, left bool, st State) {
	first := l.s.queue.next() == w
	pos := l.s.queue.positionOf(w)
	if now := time.Now(); first {
		// Held only by pacing, with a slot free: pacing defers a prefill
		// to spare the one under way, it does not refuse. (The token
		// budget does: a request held for its prefill past its deadline
		// would miss it, and the step with one held for the step budget
		// would spoil the running requests' time per token.)
		held := l.s.heldFor(now, w.flow)
		if ok, _ := l.b.fits(now, w.cand, l.runningLocked(), l.ResidentKV(), held, false); ok && !l.draining && l.leaveLocked(w) {
			t := l.grantLocked(now, w.enqueued, w.flow, w.cand, false)
			t.held = HoldReasons(w.held)
			return t, false, State{}
		}
	}
	if !l.leaveLocked(w) {
		return nil, false, State{}
	}
	now := time.Now()
	st = l.stateLocked(now, pos)
	// At the head, held by the token budget, it held up those behind it:
	// they may start now. (Without this a waiter behind a long prompt
	// that timed out waited for the next release, or not, as the timeout
	// and a wake at the same instant fell.)
	l.wakeLocked(now)
	return nil, true, st
}

// grantLocked grants f's request c a slot: the policy counts the grant (a
// reservation it ends: f's own, or with class its class's; its fair
// share) and the budget takes it.
func (l *Limiter) grantLocked(now, enqueued time.Time, f *flow, c candidate, class bool) *Ticket {
	l.running.Add(1)
	l.grantSum += now.Sub(l.origin)
	t := &Ticket{l: l, granted: now, queueWait: now.Sub(enqueued), flow: f, est: c.prompt, deadline: c.deadline,
		limit: l.b.limit, runningAt: int(l.running.Load())}
	t.charged = l.s.granted(now, f, class)
	l.b.take(now, t, int(l.running.Load())-1, l.ResidentKV())
	l.b.takeShort(t, c)
	l.kvPrompt.Add(int64(t.est))
	return t
}

// armPaceLocked arms the pace timer when requests wait only because of
// pacing, for the end of the oldest prefill's bound.
func (l *Limiter) armPaceLocked(now time.Time) {
	if l.s.queue.n > 0 && l.runningLocked() < l.b.limit && len(l.b.prefilling) > 0 && l.b.prefillBound > 0 && l.paceTimer == nil {
		d := l.b.prefilling[0].prefillUntil.Sub(now)
		l.paceTimer = time.AfterFunc(max(d, 0), l.paceExpired)
	}
}

// paceExpired wakes the queue when the oldest prefill's bound has passed.
func (l *Limiter) paceExpired() {
	l.mu.Lock()
	l.tallyLocked(time.Now())
	l.paceTimer = nil
	l.wakeLocked(time.Now())
	l.mu.Unlock()
}

// armReserveLocked arms the reservation timer when the next waiter is held
// only by reservations, for the end of the first of them, or re-arms it
// for an earlier end than the one it was armed for (a request refused
// later, told a shorter Retry-After).
func (l *Limiter) armReserveLocked(now time.Time) {
	if l.s.queue.n == 0 || !l.slotFreeLocked(now) {
		return
	}
	if w := l.s.queue.next(); l.runningLocked()+l.s.heldFor(now, w.flow) < l.b.limit {
		return // not held by a reservation (dropped the expired ones)
	}
	l.s.armReserve(now, func(forget func()) {
		l.mu.Lock()
		l.tallyLocked(time.Now())
		forget()
		l.wakeLocked(time.Now())
		l.mu.Unlock()
	})
}

// slotFreeLocked reports whether a slot is free and pacing lets one more
// request start its prefill, whoever it is.
func (l *Limiter) slotFreeLocked(now time.Time) bool {
	return l.runningLocked() < l.b.limit && l.b.paceFree(now)
}
