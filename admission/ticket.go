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
	generated    atomic.Int64
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

// FirstToken tells the limiter that the request's first output arrived:
// its prefill is over, and under pacing (SetPacing) the next request may
// start. Only the first call counts; a request that cannot be observed
// (not streamed) should call it when it is granted.
func (t *Ticket) FirstToken() {
	if t != nil && t.first.CompareAndSwap(false, true) {
		t.l.firstToken(t)
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
