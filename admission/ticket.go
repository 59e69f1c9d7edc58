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
