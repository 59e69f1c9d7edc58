package admission

import (
	"sync/atomic"
	"time"
)

// What the engine prefilled with a request, and when prefills were under
// way: the budget's record of first tokens, for the token model
// (Ticket.PrefillWith) and the controller's shift detector
// (Limiter.PrefillDuring).

// prefilled notes t's first token, seen now, on the requests granted
// before it whose first token had not come yet or came with its own
// (Ticket.PrefillWith): t's prompt was prefilled before or with theirs.
// Without it the token model learnt from a batch of prompts granted
// together as if each had waited only for those granted before it: the
// first of a burst of ten, prefilled in one batch with the other nine,
// took their time for its own. On scenario 30 (bursts every 3 s) that
// fitted a prefill base of 194 ms and 59 us a token to an engine whose
// prefill costs a step and 79 us a token, with a margin (P90 of measured
// over predicted) of 1.5, and the budget refused prompts a batch would
// have served in time; with the batch counted, 14 ms, 76 us and 1.04.
// Two first tokens less than half a decode step apart came out of the
// same step: they are taken as one batch whichever the gateway saw first.
func (b *budget) prefilled(now time.Time, t *Ticket) {
	tol := t.step / 2
	live := b.firsts[:0]
	for _, p := range b.firsts {
		if now.Sub(p.firstAt) <= tol {
			live = append(live, p)
		}
	}
	clear(b.firsts[len(live):])
	b.firsts = live
	if t.est > 0 {
		for _, p := range b.prefilling {
			if p.seq < t.seq && p.firstAt.IsZero() {
				p.with.Add(int64(t.est))
			}
		}
		for _, p := range b.firsts {
			if p.seq < t.seq {
				p.with.Add(int64(t.est))
			}
		}
	}
	t.firstAt = now
	b.firsts = append(b.firsts, t)
}

// prefillActivity is when prefills were under way: open counts the
// grants still prefilling (b.prefilling), lastEnd is when one last left
// it (Unix nanoseconds). Written under the limiter's lock, read without.
type prefillActivity struct{ open, lastEnd atomic.Int64 }

// ended notes that n prefills left b.prefilling at now.
func (b *budget) ended(now time.Time, n int) {
	b.activity.open.Add(int64(-n))
	b.activity.lastEnd.Store(now.UnixNano())
}
