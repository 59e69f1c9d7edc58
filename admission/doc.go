// Package admission enforces the cap: which generation requests may run on
// the engine now, which wait, and which are refused with an honest
// Retry-After. It decides nothing about where the cap should be; that is
// package admission/control (the adaptive controller) or a peer algorithm
// (admission/peers), which change the cap only through SetLimit, SetPacing
// and SetCosts and answer the limiter's hooks. This package imports slo
// only.
//
// # Overview
//
// A grant answers two questions, each in one place: who goes next (the
// policy, over the queue) and whether that request may start now (the
// budget). The grant asks them in turn, once each, in one file; the
// limiter around it owns the lock, the waiting, the timers and the errors.
//
//	 a new request     anything that may free room      its queue-wait bound
//	  (Acquire)     (release, first token, SetLimit,    (Acquire's timer)
//	      │          pacing, costs, timers, a leaver)           │
//	      ▼                       ▼                             ▼
//	arriveLocked             wakeLocked                   expireLocked      grant.go
//	      │                       │                             │
//	policy.arrival:          policy.next: who is          the queue's head  policy.go
//	ahead of the queue?      next (starvation bound);     and the slots     reserve.go
//	slots held back          slots held back              held back
//	      │                       │                             │
//	budget.fits: the cap, pacing (not at the bound), the slots   budget.go
//	held back, its prefill against the TTFT deadlines, the decode
//	step against TPOT; budget.late (wake only): its own prefill
//	now ends past its deadline
//	      │                       │                             │
//	grantLocked: policy.granted (reservation, fair share),       grant.go
//	budget.take (prefilling, KV tokens) -> a Ticket
//	or a refusal: reject, its Retry-After, the reservation       refuse.go
//	for its return
//
// The files, one job each:
//
//   - limiter.go: [Limiter], a resizable cap on slots held at once with a
//     bounded queue and a queue-wait bound. [Limiter.Acquire] returns
//     a [Ticket] that is released exactly once when the stream ends.
//     [Limiter.SetLimit] changes the cap at run time; [Limiter.Drain]
//     rejects the queue and every later request during shutdown.
//   - grant.go: the grant, the one place a slot is given: for a new
//     request (arriveLocked), for the queue whenever room may have come
//     (wakeLocked; a head held by the token budget lets one behind it that
//     fits go first: backfillLocked), and for a waiter at its queue-wait
//     bound held only by pacing (expireLocked); and the timers that wake
//     the queue.
//   - queue.go: who waits, in which order. [ClassConfig] are priority
//     classes (Request.Class, strict priority at every grant, each with a
//     share of the queue); within a class, tenants (Request.Tenant) take
//     slots by fair share of tokens served ([Fairness]: the Virtual Token
//     Counter of Sheng et al., OSDI 2024; [Ticket.Served] tells the tokens,
//     charged at release), FIFO within a tenant. A full queue sheds the
//     newest waiter of a lower class, or of the tenant with the most
//     waiters, for a request that ranks above it (ErrShed). With one class
//     and one tenant the queue is FIFO.
//   - policy.go: who goes next: the queue's order, bounded by the
//     starvation bound (a class with waiters that has had no grant for
//     starveBound gets the next slot, ahead of the higher classes and what
//     is held for them), and whether a new request may go before the
//     queue.
//   - reserve.go: the policy's reservations. A refused request holds a
//     slot back for its return, until its Retry-After (rounded up to whole
//     seconds) plus 1.5 s, at most the cap's worth, consumed when a
//     request of its kind is granted, only once the refused one may be
//     back (an earlier request of its kind is a new one, not the return):
//     from the classes below its own, and, when its tenant is under its
//     share, from the tenants of its class it goes before (at a counter no
//     higher, with fewer requests running per weight, counting its
//     reserved slots). Such a tenant's Retry-After is at most the
//     limiter's estimate of the next slot free for it, and on its return
//     it takes the slot though others wait: without it, refused for a
//     predicted deadline miss while every slot is held, it would be told
//     to come back behind everyone told so before, and find the slot taken
//     by the first of the larger tenant's many requests.
//   - budget.go: does it fit: the count of slots (the cap); the prefills
//     under way ([Limiter.SetPacing]: at most k granted requests wait for
//     their first token, [Ticket.FirstToken], each for at most a bound);
//     and, with [Costs] set by the controller ([Limiter.SetCosts]), the
//     engine's work in tokens: a request starts only while its prefill,
//     after those under way, ends before its TTFT deadline without pushing
//     theirs past (Request.PromptTokens, estimated by the proxy), and the
//     decode step with its KV tokens and those of the running requests
//     ([Ticket.Generated], [Limiter.ResidentKV]) stays within the step the
//     TPOT target allows. A request that cannot meet its deadline even with
//     the engine to itself starts when no other prefill is under way;
//     nothing is held by the step budget while nothing runs. A waiter
//     whose own prefill would now end past its deadline is refused
//     (queue_timeout) rather than served late.
//   - refuse.go: how a request is refused: the Retry-After (the Refuser
//     hook, else [EstimateRetryAfter], at most Config.MaxRetryAfter), the
//     order in which waiters refused together are told theirs, and the
//     reservation for its return.
//   - outside.go: the demand outside: each refused request expected back
//     (known again by Request.Fingerprint) until it comes back or its
//     Retry-After and a grace have passed; come back, it queues before
//     the requests that come for the first time, in the order of first
//     refusals (fairQueue.push), and may take a free slot though those
//     wait (policy.arrival); how late they come back; and the slot time
//     left idle while a waiting request, inside or outside, would have
//     been granted it ([Limiter.Outside]).
//   - state.go: snapshots: [Limiter.State], [Limiter.Held] (why waiters
//     were held), [Limiter.Classes] and [Limiter.Tenants] (the top N by
//     tokens served, the rest as "other"), for hooks, metrics and /status;
//     [Limiter.DecisionState], the controller's once a decision, adds
//     shares.go's view of the tenants.
//   - shares.go: a tenant held by its own demand (every request it has
//     running, none waiting, none refused and due back; counted at its
//     peak since the last decision, which the grant keeps): below its
//     share of its class's running requests (State.TenantShort), or at
//     most what the tenants wanting more run (State.TenantBounded). The
//     queue cannot serve it more; the controller may lower the cap for it.
//     Its flow's peak and due-back time are guarded by the limiter's lock.
//   - hooks.go: what the limiter tells and asks others: [Request]
//     (arrival time, latency targets, queue-wait bound), [State], and the
//     optional [Hooks]: [Gate] (refuse a request at once instead of
//     queueing it to fail, reason "deadline") and [Refuser] (told of every
//     refusal the limiter decides itself; answers its Retry-After). Without
//     hooks Retry-After is [EstimateRetryAfter]: position x mean slot hold
//     time / limit.
//   - precheck.go: [Limiter.Precheck], the refusal a request would get
//     now, asked before its body is read.
//   - errors.go: rejections are a [*RejectError] wrapping one
//     sentinel (ErrQueueFull, ErrQueueTimeout, ErrDeadline, ErrDraining,
//     ErrShed) with the Retry-After duration. The HTTP edge (package proxy)
//     maps them to 429/503 once.
//
// # Concurrency model
//
// A Limiter is safe for concurrent use. One mutex guards the cap, the queue
// (its classes, tenant flows and their counters, bounded to
// Fairness.MaxTenants by forgetting the least recently seen idle one),
// the hold-time mean, the budget (the tickets still prefilling, with the
// pace timer, and the Costs), and every change of the count of held slots;
// that count is one atomic counter, so the proxy can read it per chunk
// without the lock (Running), and so are the KV tokens of the running
// requests (ResidentKV: their prompts, added at the grant under the lock,
// and their output, added by Ticket.Generated per chunk without it). Each
// queued request blocks its own goroutine on a channel
// that the limiter closes, under the lock, when it grants a slot or drains the queue; a
// waiter whose context ends or whose bound expires takes the lock, and if
// its grant raced in it hands the slot on (cancel) or keeps it (timeout).
// Hooks are called without the lock held and may read the limiter. The
// limiter starts no goroutines and uses timers only while a request waits
// (its queue-wait bound, and the pace timer that grants it when the oldest
// prefill's bound ends: a time.AfterFunc, which runs on its own goroutine
// when it fires).
//
// # Ownership
//
// The limiter owns all admission state. A Ticket belongs to the request
// that acquired it; the proxy releases it from a defer so that a panic
// cannot leak a slot, and tells it of the first token. The controller
// (admission/control's Loop, or a peer) owns the decision of the cap, of
// the prefill limit and of the token budget and changes them only through
// SetLimit, SetPacing and SetCosts; the owner of the limiter (the gateway)
// installs its hooks, once.
package admission
