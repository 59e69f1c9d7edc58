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
	// MaxRetryAfter bounds the Retry-After of every refusal; 0 means none.
	// The OpenAI SDKs wait a server's Retry-After only up to 60 s and
	// otherwise retry within a second or so: a longer one is as good as
	// none, and a client told the bound comes back and is told again.
	MaxRetryAfter time.Duration
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
	maxRetry time.Duration // Config.MaxRetryAfter
	origin   time.Time     // base of grantSum

	running atomic.Int64 // slots held; written under mu, read without it
	// The KV tokens the running requests hold in the engine: their prompts
	// (estimated; written under mu) and their output so far (added by
	// Ticket.Generated without the lock). Read without the lock.
	kvPrompt, kvOut atomic.Int64

	mu       sync.Mutex
	b        budget  // what is held, and whether a request may add to it
	s        policy  // who goes next
	o        outside // refused requests expected back, idle slot time
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
		maxRetry: max(cfg.MaxRetryAfter, 0),
		origin:   time.Now(),
		b:        newBudget(cfg.Limit),
		o:        newOutside(time.Now()),
		hooks:    cfg.Hooks,
		s:        newPolicy(cfg.Classes, cfg.MaxQueue, cfg.Fairness),
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
	l.tallyLocked(start)
	l.o.note(req)
	req.refusals, req.since = l.o.arrived(start, req.Fingerprint)
	t, cause, st, queue := l.arriveLocked(start, start, req)
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
			ra = l.boundRetry(ra)
			re := &RejectError{Err: ErrDeadline, RetryAfter: ra, State: st}
			l.noteRefusal(re, req)
			return nil, re
		}
	}

	w := &waiter{enqueued: start, ready: make(chan struct{}), cand: candidateOf(req)}
	l.mu.Lock()
	// The state may have moved while the gate thought: check again.
	now := time.Now()
	l.tallyLocked(now)
	t, cause, st, queue = l.arriveLocked(now, start, req)
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
		l.tallyLocked(time.Now())
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
		l.tallyLocked(time.Now())
		t, left, st := l.expireLocked(w)
		hooks := l.hooks
		l.mu.Unlock()
		switch {
		case t != nil:
			return t, nil
		case left:
			return nil, l.reject(ErrQueueTimeout, hooks, req, st)
		}
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
	l.tallyLocked(time.Now())
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
	l.tallyLocked(time.Now())
	l.b.costs = c
	l.wakeLocked(time.Now())
}

// PrefillDuring reports whether a prefill was under way (a granted request
// waiting for its first token, see Ticket.FirstToken) at some moment from
// since to now: one is now, or one ended at since or later. A gap between
// two output chunks of a stream that it reports is one the engine may
// have spent prefilling another's prompt. It takes no lock.
func (l *Limiter) PrefillDuring(since time.Time) bool {
	a := l.b.activity
	return a.open.Load() > 0 || a.lastEnd.Load() >= since.UnixNano()
}

// firstToken ends t's prefill and grants a slot it held back; seen says
// whether its first token was seen (see Ticket.NoFirstToken).
func (l *Limiter) firstToken(t *Ticket, seen bool) {
	l.mu.Lock()
	now := time.Now()
	l.tallyLocked(now)
	if seen {
		l.b.prefilled(now, t)
	}
	if l.b.firstToken(now, t) {
		l.wakeLocked(now)
	}
	l.mu.Unlock()
}

// release returns a slot; measured says whether its hold time counts
// toward MeanHold (a slot handed back by a cancelled Acquire does not).
func (l *Limiter) release(t *Ticket, measured bool) {
	now := time.Now()
	l.mu.Lock()
	l.tallyLocked(now)
	l.running.Add(-1)
	l.grantSum -= t.granted.Sub(l.origin)
	l.b.release(now, t)
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
	l.tallyLocked(time.Now())
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
	l.tallyLocked(now)
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
