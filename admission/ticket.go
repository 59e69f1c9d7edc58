package admission

import (
	"sync/atomic"
	"time"
)

// Ticket is a granted slot. Release it exactly once, when the work it
// admitted has ended (for a stream: when the stream ends, not when headers
// arrive); further calls do nothing.
type Ticket struct {
	l          *Limiter
	granted    time.Time
	queueWait  time.Duration
	released   atomic.Bool
	first      atomic.Bool
	prefilling bool // guarded by l.mu: counted in l.prefilling

	flow           *flow   // the tenant's flow; guarded by l.mu
	charged        float64 // what the grant charged the flow; guarded by l.mu
	prompt, output atomic.Int64

	// What the token budget weighs (budget.go), set at the grant: the
	// estimated prompt, the TTFT deadline (zero: none), and the prefill
	// work ahead of it then; generated counts its output (Generated).
	est          int
	deadline     time.Time
	prefillUntil time.Time // it counts as prefilling until then at most
	aheadTokens  int
	aheadSpan    time.Duration
	step         time.Duration // the decode step predicted at the grant (0: unknown)
	seq          uint64        // its place in the order of grants
	// with is the prompt tokens (estimated) of the requests granted after
	// it whose first token came before or with its own (see
	// budget.prefilled); firstAt is when its own came (zero: not yet, or
	// not seen). Guarded by l.mu; with is read without it.
	with      atomic.Int64
	firstAt   time.Time
	generated atomic.Int64
	// outBound and tpot are a short answer's output bound and TPOT target
	// (see stallFits; 0: not one).
	outBound int
	tpot     time.Duration

	// What the grant knew, for Grant: the cap, the slots held with this
	// one, why it waited, its predicted time to the first token.
	limit, runningAt int
	held             HoldReasons
	predTTFT         time.Duration
}

// Grant is what the limiter knew of a request when it granted its slot.
type Grant struct {
	// Limit is the cap then; Running the requests holding a slot, this one
	// included.
	Limit, Running int
	// Held is why the request waited in the queue; none for one granted
	// at once.
	Held HoldReasons
	// EngineTTFT is the token budget's prediction of the time from the
	// grant to the first token (the prefills under way, then its own), and
	// Step its prediction of the engine's decode step then (about the time
	// per output token); zero while the budget does not know the engine's
	// costs (see SetCosts).
	EngineTTFT, Step time.Duration
}

// Grant returns what the limiter knew of the request when it granted the
// slot. The ticket does not change after its grant: Grant may be called
// after Release.
func (t *Ticket) Grant() Grant {
	return Grant{Limit: t.limit, Running: t.runningAt, Held: t.held, EngineTTFT: t.predTTFT, Step: t.step}
}

// HoldReasons is the set of reasons that held a waiter back (see
// HeldCounts): the cap, the prefill limit, the prefill and step budgets,
// reservations.
type HoldReasons uint8

var holdNames = [heldReasons]string{heldCount: "cap", heldPacing: "pacing", heldPrefill: "prefill", heldStep: "step", heldReserve: "reserved"}

// String returns the reasons joined by commas, in the order of
// HeldCounts' fields (their names are the reason labels of
// kneecap_admission_held_total), or "" for none.
func (h HoldReasons) String() string {
	s := ""
	for i, name := range holdNames {
		if h&(1<<i) != 0 {
			if s != "" {
				s += ","
			}
			s += name
		}
	}
	return s
}

// Served records the tokens the request was served (prompt and output,
// from the engine's usage report), to be charged to its tenant's fair
// share when the ticket is released: call it before Release. A ticket
// released without it keeps the estimate charged at its grant.
func (t *Ticket) Served(prompt, output int) {
	if t != nil {
		t.prompt.Store(int64(prompt))
		t.output.Store(int64(output))
	}
}

// Generated tells the limiter that n more output tokens of the request
// were produced (the proxy calls it per output chunk): they are resident
// in the engine's KV cache and count to the step budget. It takes no lock.
func (t *Ticket) Generated(n int) {
	if t != nil && !t.released.Load() {
		t.generated.Add(int64(n))
		t.l.kvOut.Add(int64(n))
	}
}

// PrefillAhead returns the prompt tokens (estimated) of the requests that
// waited for their first token when this one was granted, the time since
// the oldest of them was granted (the prefill work the engine did before
// or with this one's), and the decode step the token budget predicted
// then (0 before it knew).
func (t *Ticket) PrefillAhead() (tokens int, span, step time.Duration) {
	if t == nil {
		return 0, 0, 0
	}
	return t.aheadTokens, t.aheadSpan, t.step
}

// PrefillWith returns the prompt tokens (estimated) of the requests
// granted after this one whose first token came before or with its own, as
// far as seen so far: the engine prefilled them with it, in the batch it
// formed of the prompts waiting together, or before it. Read it once the
// request has ended (its batch's first tokens have all come by then).
func (t *Ticket) PrefillWith() int {
	if t == nil {
		return 0
	}
	return int(t.with.Load())
}

// FirstToken tells the limiter that the request's first output arrived:
// its prefill is over, and under pacing (SetPacing) the next request may
// start. Only the first call (of it or NoFirstToken) counts.
func (t *Ticket) FirstToken() {
	if t != nil && t.first.CompareAndSwap(false, true) {
		t.l.firstToken(t, true)
	}
}

// NoFirstToken tells the limiter that the request's first token will not
// be seen (it is not streamed, or its stream ended without output): its
// prefill counts as over, as with FirstToken, so that it does not hold
// back the next request's, but when the engine prefilled it is not known
// (it is no request's batch-mate, see PrefillWith). Call it when it is
// granted, or when the stream ends. Only the first call (of it or
// FirstToken) counts.
func (t *Ticket) NoFirstToken() {
	if t != nil && t.first.CompareAndSwap(false, true) {
		t.l.firstToken(t, false)
	}
}

// Release returns the slot. It is safe to call more than once and from a
// defer; only the first call counts.
func (t *Ticket) Release() {
	if t != nil && t.released.CompareAndSwap(false, true) {
		t.l.release(t, true)
	}
}

func (t *Ticket) releaseUnmeasured() {
	if t.released.CompareAndSwap(false, true) {
		t.l.release(t, false)
	}
}

// Granted returns when the slot was granted.
func (t *Ticket) Granted() time.Time { return t.granted }

// QueueWait returns how long the request waited for the slot.
func (t *Ticket) QueueWait() time.Duration { return t.queueWait }
