package admission

import (
	"container/heap"
	"time"
)

// The demand outside: the refused requests the limiter expects back, and
// the slot time left idle while demand waited. A refused request is an
// error in its client's application unless the client retries it, and
// while the client waits out its Retry-After a slot that frees has nobody
// to take it: the engine idles although demand exists. The limiter counts
// that time, so that a Retry-After that sends clients away for longer than
// the slot takes to free shows.
//
// A request is known again by its fingerprint (Request.Fingerprint: its
// tenant, route and body, hashed by the caller): the OpenAI SDKs and most
// retry loops send the same body again. A refused request is away from its
// refusal until it comes back or until its Retry-After and returnGrace
// have passed (its client came back as someone the limiter cannot tell, or
// gave up). A request refused on its client's last try (Request.Retries
// at lastTry, or its third refusal) is not expected back: its client gave
// up.

// returnGrace is how long past its Retry-After a refused request is still
// expected back: a client that reads Retry-After in whole seconds comes
// back up to a second after the wait it was told, and a little later than
// that with its own delays.
const returnGrace = 1500 * time.Millisecond

// lastTry is the retry count (X-Stainless-Retry-Count) of the OpenAI
// SDKs' last attempt with their default of two retries; a request
// refused a third time has failed in its client's application whatever
// the client says.
const lastTry = 2

// maxAway bounds the refused requests remembered at once; beyond it the
// one whose grace ends first is forgotten (a flood of refused requests
// that never come back costs a heap operation each, not a scan).
const maxAway = 1 << 16

// away is one refused request expected back.
type away struct {
	key      uint64
	refusals int       // times refused so far
	since    time.Time // its first refusal: its place in line
	prompt   int       // its prompt tokens (estimated)
	at       time.Time // its latest refusal
	due      time.Time // when its Retry-After ends
	until    time.Time // due + returnGrace: expected back by then
	index    int       // in awayHeap
}

// awayHeap orders the refused requests by until, earliest first.
type awayHeap []*away

func (h awayHeap) Len() int           { return len(h) }
func (h awayHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h awayHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *awayHeap) Push(x any) {
	a := x.(*away)
	a.index = len(*h)
	*h = append(*h, a)
}
func (h *awayHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	a.index = -1
	return a
}

// outside holds the refused requests expected back and the idle slot
// time. Guarded by the limiter's lock.
type outside struct {
	byKey map[uint64]*away
	due   awayHeap
	// idle is the slot time left idle while demand waited, counted up to
	// at: integrated over time, the slots free under the cap, at most the
	// requests queued plus those away.
	idle time.Duration
	at   time.Time
	// Counts: returns (a refused request seen again), refusals of a
	// returned request, and requests refused on their last try.
	returned, again, gaveUp int64
	// lateness is the mean of how long after its Retry-After a request
	// came back (negative: early), weighted 1/8 for the newest.
	lateness time.Duration
	// honoured is the longest wait the clients are seen to honour: 0
	// until a refused request comes back more than earlyBy before its
	// Retry-After (its client waits at most so long), then a moving mean
	// of such early returns' waits, raised to any Retry-After honoured in
	// full that is longer.
	honoured time.Duration
	// early is the share of returns that came back early (the newest
	// weighted 1/8): honoured counts only while it is at least half, so
	// that a few clients that do not wait (or one that sends the same body
	// again every second) cannot cut every client's promises short.
	early float64
	// meanTTFT is the TTFT target of the requests that come, a moving
	// mean (see note); promptSum the prompt tokens of those away.
	meanTTFT  time.Duration
	promptSum int
}

func newOutside(now time.Time) outside {
	return outside{byKey: map[uint64]*away{}, at: now}
}

// tally counts the idle slot time from o.at to now, with free slots free
// under the cap and queued requests queued all along (the caller calls it
// before it changes either), the refused requests leaving the count as
// their grace ends.
func (o *outside) tally(now time.Time, free slots) {
	if free.head <= 0 && free.away <= 0 {
		o.expire(now)
		if now.After(o.at) {
			o.at = now
		}
		return
	}
	for len(o.due) > 0 && !o.due[0].until.After(now) {
		o.add(o.due[0].until, free)
		o.forget(o.due[0])
	}
	o.add(now, free)
}

// slots are the slots free for the demand waiting: for the head of the
// queue (queued waiters), and for a request like those refused and
// expected back (see Limiter.tallyLocked).
type slots struct {
	head, queued, away int
}

// add counts the idle slot time from o.at to t: the slots the head of
// the queue would be granted, at most the waiters, and of those left the
// slots a request like the refused ones would, at most as many as are
// expected back.
func (o *outside) add(t time.Time, free slots) {
	if !t.After(o.at) {
		return
	}
	in := 0
	if free.queued > 0 {
		in = min(max(free.head, 0), free.queued)
	}
	out := min(max(free.away-in, 0), len(o.due))
	if n := in + out; n > 0 {
		o.idle += time.Duration(n) * t.Sub(o.at)
	}
	o.at = t
}

// awayPrompt is the mean prompt of the refused requests expected back.
func (o *outside) awayPrompt() int {
	if len(o.due) == 0 {
		return 0
	}
	return o.promptSum / len(o.due)
}

// expire forgets the refused requests whose grace ended by now.
func (o *outside) expire(now time.Time) {
	for len(o.due) > 0 && !o.due[0].until.After(now) {
		o.forget(o.due[0])
	}
}

func (o *outside) forget(a *away) {
	o.promptSum -= a.prompt
	heap.Remove(&o.due, a.index)
	delete(o.byKey, a.key)
}

// arrived takes a request of fingerprint key that comes now off the
// refused requests expected back, and returns how often it was refused
// before (0: not a return, or not known) and when first.
func (o *outside) arrived(now time.Time, key uint64) (int, time.Time) {
	a := o.byKey[key]
	if key == 0 || a == nil {
		return 0, time.Time{}
	}
	o.forget(a)
	o.returned++
	late := now.Sub(a.due)
	if o.returned == 1 {
		o.lateness = late
	} else {
		o.lateness += (late - o.lateness) / 8
	}
	isEarly := 0.0
	if late < -earlyBy {
		isEarly = 1
	}
	if o.returned == 1 {
		o.early = isEarly
	} else {
		o.early += (isEarly - o.early) / 8
	}
	switch waited, told := now.Sub(a.at), a.due.Sub(a.at); {
	case late >= -earlyBy:
		if o.honoured > 0 && told > o.honoured {
			o.honoured = told
		}
	case o.honoured == 0:
		o.honoured = waited
	default:
		o.honoured += (waited - o.honoured) / 8
	}
	return a.refusals, a.since
}

// honouredNow is the longest Retry-After the clients are seen to wait
// out, 0 unless most returns come back early.
func (o *outside) honouredNow() time.Duration {
	if o.early < 0.5 {
		return 0
	}
	return o.honoured
}

// earlyBy is how much earlier than its Retry-After a request must come
// back to show that its client bounds the wait: a client reading the
// header's whole seconds, or retry-after-ms, is never early by so much.
const earlyBy = time.Second

// refused counts a refusal at now of a request of fingerprint key and
// prompt tokens prompt, refused refusals times before (first at since;
// zero: now), whose client counts retries retries (0 when it does not
// say), told to come back after retry; it is expected back unless this was
// its client's last try.
func (o *outside) refused(now time.Time, key uint64, prompt, refusals, retries int, since time.Time, retry time.Duration) {
	if refusals > 0 {
		o.again++
	}
	if refusals+1 > lastTry || retries >= lastTry {
		o.gaveUp++
		return
	}
	if key == 0 || retry <= 0 {
		return
	}
	if a := o.byKey[key]; a != nil {
		o.forget(a) // the same body refused twice at once: one is expected
	}
	if len(o.due) >= maxAway {
		o.forget(o.due[0]) // the one whose grace ends first
	}
	due := now.Add(retry)
	if since.IsZero() {
		since = now
	}
	a := &away{key: key, prompt: prompt, refusals: refusals + 1, since: since, at: now, due: due, until: due.Add(returnGrace)}
	o.promptSum += prompt
	o.byKey[key] = a
	heap.Push(&o.due, a)
}

// OutsideStats is the demand the limiter turned away and the slot time
// left idle while demand waited (see Limiter.Outside).
type OutsideStats struct {
	// Away is the refused requests expected back now.
	Away int
	// IdleSlotTime is the slot time left idle while requests were queued
	// or refused requests were expected back: integrated over time, the
	// slots free under the cap, at most the requests waiting inside and
	// outside.
	IdleSlotTime time.Duration
	// Returned counts refused requests that came back; RefusedAgain the
	// refusals of such a request; GaveUp the refusals of a request on its
	// client's last try (X-Stainless-Retry-Count 2, or its third refusal):
	// each one a failed request in its client's application.
	Returned, RefusedAgain, GaveUp int64
	// Lateness is the mean of how long after its Retry-After a refused
	// request came back (negative: early), the newest weighted 1/8; 0
	// before the first return.
	Lateness time.Duration
	// Honoured is the longest Retry-After the clients are seen to wait
	// out: 0 unless most returns (a moving share) came back more than a
	// second early, then the mean wait of such early returns (the newest
	// weighted 1/8), raised to any longer Retry-After waited out in full.
	Honoured time.Duration
}

// Outside returns the demand turned away and the idle slot time, counted
// up to now.
func (l *Limiter) Outside() OutsideStats {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tallyLocked(now)
	o := &l.o
	return OutsideStats{Away: len(o.due), IdleSlotTime: o.idle, Returned: o.returned, RefusedAgain: o.again, GaveUp: o.gaveUp, Lateness: o.lateness, Honoured: o.honouredNow()}
}

// tallyLocked counts the idle slot time up to now; every change of the
// running, queued or refused requests calls it first.
//
// A slot is idle while a request waiting for one would have been granted
// it now: the head of the queue (the count cap and the budget have room
// for it, yet it waits: held back for a refused request's return, say),
// or a request like those refused and expected back (their mean prompt
// and the mean TTFT target), counted as many as would be granted one
// after another (budget.room). A slot the token budget holds because the
// engine is busy is not idle, and neither is one no waiting request fits.
func (l *Limiter) tallyLocked(now time.Time) {
	var free slots
	if running := l.runningLocked(); running < l.b.limit {
		resident := l.ResidentKV()
		if free.queued = l.s.queue.n; free.queued > 0 {
			free.head = l.b.room(now, l.s.queue.next().cand, running, resident)
		}
		if len(l.o.due) > 0 {
			like := candidate{prompt: l.o.awayPrompt()}
			if l.o.meanTTFT > 0 {
				like.deadline = now.Add(l.o.meanTTFT)
			}
			free.away = l.b.room(now, like, running, resident)
		}
	}
	l.o.tally(now, free)
}

// note counts the TTFT target of a request that comes: the mean is what a
// refused request's room is judged by (see tallyLocked).
func (o *outside) note(req Request) {
	if t := req.Targets.TTFT; t > 0 {
		if o.meanTTFT == 0 {
			o.meanTTFT = t
		} else {
			o.meanTTFT += (t - o.meanTTFT) / 32
		}
	}
}
