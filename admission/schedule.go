package admission

import (
	"container/heap"
	"slices"
	"time"
)

// The release schedule: when the limiter's slots are predicted to free.
// A request that waits, inside the queue or outside it (refused, told to
// come back), waits for a release: the k-th in line for the k-th. Each
// running request is predicted to end after its output left at the decode
// step the token budget predicts (Costs; without them, after a mean slot
// hold from its grant), and each slot then holds a new request for a mean
// slot hold. A refused request's Retry-After is its release (the
// controller's to tell), so that it comes back when a slot frees for it,
// not later: a slot free while its client is still away is idle although
// demand exists.

// expectOutput is the output tokens a ticket of c is expected to make: its
// own bound when it is within half again the mean of requests (the
// engine's ignore_eos or a tight max_tokens makes it exact), else the mean;
// 0 when neither is known.
func (b *budget) expectOutput(c candidate) int {
	m := b.costs.MeanOutput
	if c.output > 0 && (m == 0 || c.output <= m*3/2) {
		return c.output
	}
	return m
}

// holdLocked is the predicted time a new request holds a slot: the mean
// measured hold, else (nothing released yet) the token budget's
// prediction of a mean request, 0 when neither is known.
func (l *Limiter) holdLocked(running, resident int) time.Duration {
	if l.meanHold > 0 {
		return l.meanHold
	}
	step := l.b.costs.Step(running, resident)
	if step <= 0 || l.b.costs.MeanOutput <= 0 {
		return 0
	}
	return time.Duration(l.b.costs.MeanOutput) * step
}

// remainingLocked is the predicted time until t's request ends: its output
// left at per, the time per token (and, before its first token, what is
// left of the prefill's share of a mean hold), or, without a time per
// token or a length, the mean hold less its age. A request that has made
// enough tokens is timed by its own pace, which holds what the step alone
// does not (its neighbours' prefills stalling it).
func (l *Limiter) remainingLocked(now time.Time, t *Ticket, per, hold time.Duration) time.Duration {
	age := now.Sub(t.granted)
	if per <= 0 || t.expect <= 0 {
		return max(hold-age, 0)
	}
	made := int(t.generated.Load())
	if own, ok := ownPace(now, t, made); ok {
		per = own
	}
	left := time.Duration(max(t.expect-made, 1)) * per
	if !t.first.Load() {
		prefill := hold - time.Duration(t.expect)*per
		if l.b.costs.knowsPrefill() {
			prefill = l.b.costs.prefillOf(t.est, l.b.costs.Step(l.runningLocked(), l.ResidentKV()))
		}
		left += max(prefill-age, 0)
	}
	return left
}

// paceTokens is how many tokens a request must have made for its own pace
// to time the rest of it.
const paceTokens = 8

// ownPace is t's time per token since its first, once it made
// paceTokens (made counts its output chunks so far).
func ownPace(now time.Time, t *Ticket, made int) (time.Duration, bool) {
	if !t.first.Load() || t.firstAt.IsZero() || made <= paceTokens {
		return 0, false
	}
	return now.Sub(t.firstAt) / time.Duration(made-1), true
}

// releaseHeap holds when each slot frees next, earliest first.
type releaseHeap []time.Duration

func (h releaseHeap) Len() int           { return len(h) }
func (h releaseHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h releaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *releaseHeap) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *releaseHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// maxPlace bounds how far down the line a release is predicted.
const maxPlace = 4096

// releaseLocked is the predicted time from now until the place-th slot
// frees for a request c waiting now (place 1: the next), and whether it
// can be predicted (something was measured). Free slots free at once, but
// for the engine's room: when the token budget holds c (see
// budget.roomFor), the slots are as many as run; slots held beyond the
// cap (it was lowered) free for nobody.
func (l *Limiter) releaseLocked(now time.Time, place int, c candidate) (time.Duration, bool) {
	running, resident := l.runningLocked(), l.ResidentKV()
	hold := l.holdLocked(running, resident)
	if hold <= 0 {
		return 0, false
	}
	// The time per token of the requests that have not made enough to be
	// timed by their own pace: the mean pace of those that have, else the
	// token budget's step.
	per := l.b.costs.Step(running, resident)
	var sum time.Duration
	n := 0
	for t := range l.tickets {
		if own, ok := ownPace(now, t, int(t.generated.Load())); ok {
			sum += own
			n++
		}
	}
	if n > 0 && per > 0 {
		per = sum / time.Duration(n)
	}
	left := make([]time.Duration, 0, len(l.tickets))
	for t := range l.tickets {
		left = append(left, l.remainingLocked(now, t, per, hold))
	}
	slices.Sort(left)
	limit := l.b.limit
	if limit > running && !l.b.roomFor(now, c, running, resident) {
		// The engine is full by the token budget, not by the cap: the
		// slots under the cap free only as requests end.
		limit = max(running, 1)
	}
	if over := len(left) - limit; over > 0 {
		left = left[over:] // these releases bring the count down to the cap
	}
	for len(left) < limit {
		left = append(left, 0)
	}
	h := releaseHeap(left)
	heap.Init(&h)
	var at time.Duration
	for range min(max(place, 1), maxPlace) {
		at = h[0]
		h[0] += hold
		heap.Fix(&h, 0)
	}
	return at, true
}

// placeLocked completes st, the state at position st.Position in the
// queue, for a request of class c: the refused requests expected back that
// go before it, and the predicted time until the slot of its place in line
// frees. The line is kept in the order of first refusals: a request come
// back goes after those refused before it, inside or outside, and before
// those refused after it and those that come for the first time.
func (l *Limiter) placeLocked(now time.Time, st *State, class int, c candidate) {
	st.Back, st.LastTry = c.back, c.back >= lastTry || c.retries >= lastTry
	if c.back > 0 {
		st.Position = max(1, min(st.Position, l.s.queue.returnsBefore(class, c.since)+1))
	}
	st.Away = l.o.ahead(class, c.since)
	st.Release, _ = l.releaseLocked(now, st.Position+st.Away, c)
	st.Lateness = l.o.lateness
}
