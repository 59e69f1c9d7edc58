package admission

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Limiter.
type Config struct {
	// Limit is the initial cap on slots held at once; values below 1 mean 1.
	Limit int
	// MaxQueue is how many requests may wait for a slot; 0 means none may
	// (every request beyond the cap is rejected with ErrQueueFull).
	MaxQueue int
	// Hooks are the optional Gate and Refuser; see SetHooks.
	Hooks Hooks
	// Classes are the priority classes, highest first (Request.Class is an
	// index into them). nil means one class, "default".
	Classes []ClassConfig
	// Fairness shares each class's slots among tenants (Request.Tenant).
	Fairness Fairness
}

// holdWeight is the weight of the newest release in MeanHold.
const holdWeight = 1.0 / 8

// Limiter caps the number of slots held at once and queues the excess:
// by strict priority across classes, by fair share of tokens served among
// the tenants of a class (see Fairness), FIFO within a tenant. With one
// class and one tenant the queue is FIFO. It is safe for concurrent use;
// the zero value is not usable, call NewLimiter.
type Limiter struct {
	maxQueue int
	origin   time.Time // base of grantSum

	running atomic.Int64 // slots held; written under mu, read without it
	// The KV tokens the running requests hold in the engine: their prompts
	// (estimated; written under mu) and their output so far (added by
	// Ticket.Generated without the lock). Read without the lock.
	kvPrompt, kvOut atomic.Int64

	mu       sync.Mutex
	b        budget    // what is held, and whether a request may add to it
	s        scheduler // who goes next
	draining bool
	hooks    Hooks
	meanHold time.Duration // 0 until the first release
	grantSum time.Duration // sum over held slots of (grant time - origin)

	// paceTimer wakes the queue when the oldest prefill's bound ends while
	// requests wait with a slot free (see SetPacing).
	paceTimer *time.Timer
}

// waiter is one queued request. ready is closed when it was granted a slot
// (ticket set) or rejected (err set), always under the limiter's lock.
type waiter struct {
	cand     candidate     // what the token budget weighs of it
	held     uint8         // the hold reasons counted for it (budget.hold)
	flow     *flow         // the tenant's flow in its class
	elem     *list.Element // in flow.waiters while queued
	enqueued time.Time
	ready    chan struct{}
	ticket   *Ticket
	err      error // a sentinel cause, with state
	state    State
	// turn and done order the Refused hooks of waiters refused in one
	// pass (see refuseLocked): a waiter's hook runs after turn is closed
	// (nil: at once), and it closes done when its hook has run or it
	// left without one.
	turn, done chan struct{}
}

// passTurn lets the next waiter refused in the same pass call its hook,
// once the one before has (the hooks' order stays the refusals').
func (w *waiter) passTurn() {
	if w.turn != nil {
		<-w.turn
		w.turn = nil
	}
	if w.done != nil {
		close(w.done)
		w.done = nil
	}
}

// NewLimiter returns a limiter. It starts no goroutine.
func NewLimiter(cfg Config) *Limiter {
	l := &Limiter{
		maxQueue: max(cfg.MaxQueue, 0),
		origin:   time.Now(),
		b:        newBudget(cfg.Limit),
		hooks:    cfg.Hooks,
		s:        newScheduler(cfg.Classes, cfg.MaxQueue, cfg.Fairness),
	}
	return l
}

// SetHooks replaces the hooks, for wiring where the hooks
// are built after the limiter (an adaptive controller that needs the
// limiter itself).
func (l *Limiter) SetHooks(h Hooks) {
	l.mu.Lock()
	l.hooks = h
	l.mu.Unlock()
}

// Acquire asks for a slot. It returns a Ticket that must be released
// exactly once when the work ends, or an error: a *RejectError (wrapping
// ErrQueueFull, ErrQueueTimeout, ErrDeadline, ErrDraining or ErrShed) or
// ctx.Err().
//
// A request that cannot run at once waits (see Limiter for the order), at
// most until its queue-wait bound. When the queue has no room it may
// displace a waiter of a lower class, or of a tenant of its class with
// more waiters than its own; that waiter is refused with ErrShed. If ctx
// ends while it waits, it leaves the queue at once;
// if a slot was granted in the same instant, that slot is handed on and
// Acquire still returns ctx.Err(), leaving the state as if the request had
// never come.
func (l *Limiter) Acquire(ctx context.Context, req Request) (*Ticket, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	l.mu.Lock()
	t, cause, st, queue := l.tryLocked(start, start, req)
	hooks := l.hooks
	l.mu.Unlock()
	switch {
	case cause != nil:
		return nil, l.reject(cause, hooks, req, st)
	case !queue:
		return t, nil
	}
	if hooks.Gate != nil {
		if ok, ra := hooks.Gate.Admit(req, st); !ok {
			if ra <= 0 {
				ra = l.retryAfter(hooks, req, st)
			}
			re := &RejectError{Err: ErrDeadline, RetryAfter: ra, State: st}
			l.noteRefusal(re, req)
			return nil, re
		}
	}

	w := &waiter{enqueued: start, ready: make(chan struct{}), cand: candidateOf(req)}
	l.mu.Lock()
	// The state may have moved while the gate thought: check again.
	t, cause, st, queue = l.tryLocked(time.Now(), start, req)
	hooks = l.hooks
	if !queue {
		l.mu.Unlock()
		if cause != nil {
			return nil, l.reject(cause, hooks, req, st)
		}
		return t, nil
	}
	w.flow = l.s.queue.flowFor(req.Class, req.Tenant)
	l.enqueueLocked(time.Now(), w)
	l.wakeLocked(time.Now())
	l.mu.Unlock()

	var timeout <-chan time.Time
	if maxWait := req.MaxWait; maxWait > 0 {
		timer := time.NewTimer(maxWait - time.Since(start))
		defer timer.Stop()
		timeout = timer.C
	}

	select {
	case <-w.ready:
		return l.woken(w, req)
	case <-ctx.Done():
		l.mu.Lock()
		if l.leaveLocked(w) {
			l.wakeLocked(time.Now()) // it may have held up those behind it
			l.mu.Unlock()
			return nil, ctx.Err()
		}
		l.mu.Unlock()
		// Granted (or refused) as ctx ended: hand a slot on untouched, or
		// the turn to call the Refused hook.
		if w.ticket != nil {
			w.ticket.releaseUnmeasured()
		}
		w.passTurn()
		return nil, ctx.Err()
	case <-timeout:
		l.mu.Lock()
		first := l.s.queue.next() == w
		pos := l.s.queue.positionOf(w)
		if now := time.Now(); first && l.heldOnlyByPacingLocked(now, w) && !l.draining && l.leaveLocked(w) {
			// Held only by pacing, with a slot free: pacing defers a
			// prefill to spare the one under way, it does not refuse. (The
			// token budget does: a request held for its prefill past its
			// deadline would miss it, and the step with one held for the
			// step budget would spoil the running requests' time per
			// token.)
			w.ticket = l.grantLocked(now, w.enqueued, w.flow, w.cand, false)
			w.ticket.held = HoldReasons(w.held)
			l.mu.Unlock()
			return w.ticket, nil
		}
		if l.leaveLocked(w) {
			now := time.Now()
			st := l.stateLocked(now, pos)
			// At the head, held by the token budget, it held up those
			// behind it: they may start now. (Without this a waiter behind
			// a long prompt that timed out waited for the next release,
			// or not, as the timeout and a wake at the same instant fell:
			// scenario 16 did not repeat.)
			l.wakeLocked(now)
			hooks := l.hooks
			l.mu.Unlock()
			return nil, l.reject(ErrQueueTimeout, hooks, req, st)
		}
		l.mu.Unlock()
		// A slot came in the same instant as the timeout: take it.
		return l.woken(w, req)
	}
}

// woken returns what a waiter was woken with: a slot, or a rejection whose
// Retry-After is computed here, outside the lock, in the order the waiters
// were refused (see refuseLocked).
func (l *Limiter) woken(w *waiter, req Request) (*Ticket, error) {
	if w.err != nil {
		if w.turn != nil {
			<-w.turn
			w.turn = nil
		}
		defer w.passTurn()
		l.mu.Lock()
		hooks := l.hooks
		l.mu.Unlock()
		return nil, l.reject(w.err, hooks, req, w.state)
	}
	return w.ticket, nil
}

// refuseLocked refuses a waiter taken off the queue with cause and state,
// after prev (nil: the first refused in this pass), and returns it as the
// next one's prev. The Refused hook is what tells each its Retry-After,
// and the controller's answer depends on the answers before it (it sends
// each refused request to a later release): waiters woken at one instant
// run in no fixed order, so each one's hook waits for the one refused
// before it, and the answers follow the queue's order, not the scheduler's.
func (l *Limiter) refuseLocked(w, prev *waiter, cause error, st State) *waiter {
	w.err, w.state = cause, st
	w.done = make(chan struct{})
	if prev != nil {
		w.turn = prev.done
	}
	close(w.ready)
	return w
}

// tryLocked grants a slot at once, refuses (cause set, with the state to
// explain it), or says the request must queue. It never calls a hook:
// hooks run without the lock (see reject).
//
// When it must queue, st is the state with the place the request would
// take.
func (l *Limiter) tryLocked(now, start time.Time, req Request) (t *Ticket, cause error, st State, queue bool) {
	if l.draining {
		return nil, ErrDraining, l.stateLocked(now, l.s.queue.n+1), false
	}
	f := l.s.queue.flowFor(req.Class, req.Tenant)
	c := candidateOf(req)
	if l.b.overPrefillTokens(now, c.prompt, l.s.queue.tokens) {
		return nil, ErrQueueFull, l.stateLocked(now, l.s.queue.position(f)), false
	}
	if l.s.mayJump(now, f) {
		if ok, _ := l.fitsLocked(now, c, l.s.heldFor(now, f)); ok {
			// Perhaps a refused request come back: its reservation ends.
			// (A tenant's slot held back from the waiters it goes before
			// is its own to take, see scheduler.reserve.)
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

// enqueueLocked queues w; a waiter it displaces is refused with ErrShed.
func (l *Limiter) enqueueLocked(now time.Time, w *waiter) {
	if v := l.s.enqueue(w); v != nil {
		v.err, v.state = ErrShed, l.stateLocked(now, l.s.queue.position(v.flow))
		close(v.ready)
	}
}

// reject builds a rejection; call it without the lock held.
// A refused request of a higher class has a slot reserved for its return
// (see scheduler.reserve).
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
			return d
		}
	}
	if d := EstimateRetryAfter(s); d > 0 {
		return d
	}
	return max(req.MaxWait, 0)
}

// leaveLocked removes a waiter that gave up. It returns false when the
// waiter was already granted or rejected (ready closed), in which case the
// caller owns w.ticket.
func (l *Limiter) leaveLocked(w *waiter) bool {
	select {
	case <-w.ready:
		return false
	default:
	}
	l.s.queue.remove(w)
	return true
}

// grantLocked grants f's request c a slot: the scheduler counts the grant
// (a reservation it ends: f's own, or with class its class's; its fair
// share) and the budget takes it.
func (l *Limiter) grantLocked(now, enqueued time.Time, f *flow, c candidate, class bool) *Ticket {
	l.running.Add(1)
	l.grantSum += now.Sub(l.origin)
	t := &Ticket{l: l, granted: now, queueWait: now.Sub(enqueued), flow: f, est: c.prompt, deadline: c.deadline,
		limit: l.b.limit, runningAt: int(l.running.Load())}
	t.charged = l.s.granted(now, f, class)
	l.b.take(now, t, int(l.running.Load())-1, l.ResidentKV())
	l.kvPrompt.Add(int64(t.est))
	return t
}

// fitsLocked reports whether a request c may take a slot now: the
// budget has room for it beside held more slots held back from it (see
// scheduler.heldFor), and if not the reason.
func (l *Limiter) fitsLocked(now time.Time, c candidate, held int) (bool, int) {
	return l.b.fits(now, c, l.runningLocked(), l.ResidentKV(), held)
}

// heldOnlyByPacingLocked reports whether w would be granted now but for
// the prefill limit.
func (l *Limiter) heldOnlyByPacingLocked(now time.Time, w *waiter) bool {
	running := l.runningLocked()
	if running+l.s.heldFor(now, w.flow) >= l.b.limit {
		return false
	}
	return l.b.prefillFits(now, w.cand, running, l.ResidentKV()) && l.b.stepFits(w.cand, running, l.ResidentKV())
}

// slotFreeLocked reports whether a slot is free and pacing lets one more
// request start its prefill, whoever it is.
func (l *Limiter) slotFreeLocked(now time.Time) bool {
	return l.runningLocked() < l.b.limit && l.b.paceFree(now)
}

// wakeLocked grants slots to waiters, in the queue's order, while the
// budget has room for the next. When waiters are held only by pacing, it
// arms the pace timer for the end of the oldest prefill's bound.
func (l *Limiter) wakeLocked(now time.Time) {
	var prev *waiter
	for l.s.queue.n > 0 {
		w, held := l.s.queue.next(), 0
		if a := l.s.starved(now); a != nil {
			w = a // before the higher classes and what is held for them
		} else {
			held = l.s.heldFor(now, w.flow)
		}
		if ok, why := l.fitsLocked(now, w.cand, held); !ok {
			l.b.hold(w, why)
			break
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
	l.paceTimer = nil
	l.wakeLocked(time.Now())
	l.mu.Unlock()
}

// SetPacing makes the limiter pace prefills: a request is granted a slot
// only while fewer than maxPrefill granted requests wait for their first
// token (Ticket.FirstToken), so that prompts the engine would prefill in
// one step, each stalling the other, start one after another instead. A
// request counts as prefilling for at most bound after its grant, so an
// engine that never answers cannot hold the queue. maxPrefill 0 turns
// pacing off.
func (l *Limiter) SetPacing(maxPrefill int, bound time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.maxPrefill, l.b.prefillBound = max(maxPrefill, 0), bound
	l.wakeLocked(time.Now())
}

// SetCosts sets the token budget: what the engine's work costs, as a
// controller learned it (see Costs). A request is granted a slot only if,
// beside the count cap and the prefill limit, its prefill would end before
// its TTFT deadline without pushing a prefill under way past its own, and
// the decode step with it stays within Costs.StepLimit. A request that
// would miss its deadline even with the engine to itself starts when no
// other prefill is under way, and one is never held by the step budget
// while nothing runs: no request is starved for its size. The zero Costs
// turn the budget off.
func (l *Limiter) SetCosts(c Costs) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.costs = c
	l.wakeLocked(time.Now())
}

// firstToken ends t's prefill and grants a slot it held back.
func (l *Limiter) firstToken(t *Ticket) {
	l.mu.Lock()
	if l.b.firstToken(t) {
		l.wakeLocked(time.Now())
	}
	l.mu.Unlock()
}

// release returns a slot; measured says whether its hold time counts
// toward MeanHold (a slot handed back by a cancelled Acquire does not).
func (l *Limiter) release(t *Ticket, measured bool) {
	now := time.Now()
	l.mu.Lock()
	l.running.Add(-1)
	l.grantSum -= t.granted.Sub(l.origin)
	l.b.release(t)
	l.kvPrompt.Add(-int64(t.est))
	l.kvOut.Add(-t.generated.Swap(0))
	l.s.queue.settle(t.flow, t.charged, int(t.prompt.Load()), int(t.output.Load()))
	if measured {
		hold := now.Sub(t.granted)
		if l.meanHold == 0 {
			l.meanHold = hold
		} else {
			l.meanHold += time.Duration(holdWeight * float64(hold-l.meanHold))
		}
	}
	l.wakeLocked(now)
	l.mu.Unlock()
}

// SetLimit changes the cap at run time; values below 1 mean 1. Raising it
// grants queued requests at once; lowering it lets running requests finish
// and grants no more until they are below the new cap.
func (l *Limiter) SetLimit(n int) {
	l.mu.Lock()
	l.b.limit = max(n, 1)
	l.wakeLocked(time.Now())
	l.mu.Unlock()
}

// Limit returns the current cap.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.limit
}

// ResidentKV returns the KV tokens the running requests hold in the engine
// as the limiter counts them: their estimated prompts and the output they
// have been told of (Ticket.Generated). It takes no lock.
func (l *Limiter) ResidentKV() int { return int(max(l.kvPrompt.Load()+l.kvOut.Load(), 0)) }

// Running returns the number of slots held. It takes no lock, so the proxy
// may call it for every chunk.
func (l *Limiter) Running() int { return int(l.running.Load()) }

// runningLocked is Running for a caller that holds l.mu (it is the same
// counter; under the lock it cannot move).
func (l *Limiter) runningLocked() int { return int(l.running.Load()) }

// Drain stops admission: every queued request is rejected with ErrDraining
// and so is every later Acquire. Slots already held stay held until
// released. Drain is idempotent.
func (l *Limiter) Drain() {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.draining = true
	if l.paceTimer != nil {
		l.paceTimer.Stop()
		l.paceTimer = nil
	}
	l.s.stop()
	pos := 0
	var prev *waiter
	for l.s.queue.n > 0 {
		pos++
		w := l.s.queue.next()
		l.s.queue.remove(w)
		prev = l.refuseLocked(w, prev, ErrDraining, l.stateLocked(now, pos))
	}
}

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
		Position: pos, MeanHold: hold, Draining: l.draining,
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
