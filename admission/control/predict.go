package control

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// Query describes a request that would have to queue for a slot.
type Query struct {
	// Arrival is when the request reached the gateway; the client's TTFT
	// counts from there.
	Arrival time.Time
	// Ahead is the number of requests queued before it.
	Ahead int
	// Targets are the request's targets: the operator's with its own
	// overrides applied, as the proxy hands them to the limiter. A zero
	// TTFT is no bound: such a request is never refused for its deadline.
	Targets slo.Targets
	// MaxWait is the request's bound on its time in the queue, as the
	// limiter holds it (admission.Request.MaxWait); zero is none. One
	// longer than the TTFT target wins over the deadline check (see
	// Admit).
	MaxWait time.Duration
	// Paced is true when a slot is free and the request waits only for
	// the prefill of a request granted PrefillAge ago (see
	// Limiter.SetPacing); PrefillWait is the limiter's predicted wait for
	// the prefills under way, with its token budget (0 without).
	Paced       bool
	PrefillAge  time.Duration
	PrefillWait time.Duration
	// PrefillOwn is the request's own predicted prefill on the engine as
	// it runs now, by the limiter's token budget (0 without), paced or
	// not.
	PrefillOwn time.Duration
	// PromptTokens is the request's prompt as the gateway estimates it (0:
	// unknown).
	PromptTokens int
	// Honoured is the longest Retry-After the clients are seen to wait
	// out (admission.State.Honoured; 0: none cut one short).
	Honoured time.Duration
	// SDK is true when the request says it comes from an OpenAI SDK
	// (admission.Request.Retries of 0 or more): its client waits out a
	// Retry-After of up to 60 s, and fails after its third refusal.
	SDK bool
}

// slotInterval is the predicted mean time between two slot releases at the
// current cap, by Little's law Hold(cap)/cap, or false before the model
// knows anything.
func (c *Controller) slotInterval(now time.Time) (time.Duration, bool) {
	var hold float64
	if c.tab.ok && c.tab.s.outMean > 0 {
		hold = c.predict(c.cap).Hold
	} else if c.holdAvg.w > 0 {
		hold = c.holdAvg.mean()
	}
	if !(hold > 0) || math.IsInf(hold, 0) { // NaN or infinite: unknown
		return 0, false
	}
	return seconds(hold / float64(c.cap)), true
}

// seconds converts a prediction in seconds to a duration in
// [0, maxPredicted]; NaN is 0.
func seconds(sec float64) time.Duration { return nanos(sec * float64(time.Second)) }

// nanos converts a prediction in nanoseconds to a duration in
// [0, maxPredicted]; NaN is 0.
func nanos(ns float64) time.Duration {
	if !(ns > 0) {
		return 0
	}
	if ns >= float64(maxPredicted) {
		return maxPredicted
	}
	return time.Duration(ns)
}

// predictedEngineTTFT is the mean engine TTFT at the current cap.
func (c *Controller) predictedEngineTTFT(now time.Time) time.Duration {
	if !c.tab.ok {
		return 0
	}
	return seconds(c.predict(c.cap).MeanTTFT)
}

// PredictWait is the predicted queue wait of a request with ahead requests
// before it: slot releases come every Hold/cap on average, and a request
// that joins at a random moment waits half an interval for the first, so
//
//	wait(ahead) = (ahead + 1/2) * Hold(cap) / cap.
func (c *Controller) PredictWait(now time.Time, ahead int) (time.Duration, bool) {
	iv, ok := c.slotInterval(now)
	if !ok {
		return 0, false
	}
	return nanos((float64(ahead) + 0.5) * float64(iv)), true
}

// waitBound is the longest a request with ahead requests before it is
// predicted to queue: the (ahead+1)-th release comes within ahead+1
// intervals of now, at most, when releases come about every Hold/cap,
//
//	bound(ahead) = (ahead + 1) * Hold(cap) / cap.
//
// The deadline check uses it rather than the mean wait: where the budget
// for queueing is short (TTFT target minus engine TTFT), the mean let in
// requests that then waited a whole interval and missed, about half of
// those it queued (scenario 4 at cap 4: 64 of 250 requests missed TTFT
// after 0.74-0.98 s in the queue; with the bound, as good as cap 3).
func (c *Controller) waitBound(ahead int) (time.Duration, bool) {
	iv, ok := c.slotInterval(time.Time{})
	if !ok {
		return 0, false
	}
	return nanos(float64(ahead+1) * float64(iv)), true
}

// e2eQuantile is the P-quantile of the time from a queued request's
// arrival at the head of its wait to the end of its answer: its wait for
// the (ahead+1)-th release plus its own time from forwarding to the end,
// returned as the mean wait and the rest. Releases are taken as a Poisson
// process at the mean rate cap/Hold(cap), so the wait, a sum of k = ahead+1
// intervals, has mean k*Hold/cap and, in the normal approximation of its
// gamma distribution, P-quantile (k + z_P sqrt(k))*Hold/cap; the time on
// the engine has mean Hold(cap) and P-quantile E2E_P(cap) = TTFT_P +
// (Q_P(output) - 1) x TPOT_P. The two are independent, so the P-quantile
// of their sum is the sum of the means plus the root of the sum of the
// squared distances from mean to P-quantile:
//
//	k*iv + Hold + sqrt((z_P sqrt(k) iv)^2 + (E2E_P - Hold)^2),  iv = Hold/cap.
//
// The deadline check of a request judged by E2E uses it. The mean alone
// (waitBound and Hold) admitted requests that then waited just past it,
// every admitted one finishing within a few hundred milliseconds of the
// target, on either side by chance: its budget spans many releases (a
// dozen at the knee of scenario 19), whose sum varies. The sum of the two
// P-quantiles is the quantile of neither: it refused requests that would
// have ended in time, most where answers are long, and the cap held high
// (scenario 20, every other request not streamed: at caps 18-20 its
// clients that do not stream were refused 759 times, at 16-17 513 times,
// on the same seed, while the streams beside them were not).
func (c *Controller) e2eQuantile(ahead int) (wait, eng time.Duration, ok bool) {
	iv, ok := c.slotInterval(time.Time{})
	if !ok || !c.tab.ok {
		return 0, 0, ok
	}
	p := c.predict(c.cap)
	k := float64(ahead + 1)
	z := math.Sqrt2 * math.Erfinv(2*c.cfg.Percentile-1)
	dw := z * math.Sqrt(k) * iv.Seconds()
	de := math.Max(p.E2E-p.Hold, 0)
	return nanos(k * float64(iv)), seconds(p.Hold + math.Hypot(dw, de)), true
}

// Verdict is the answer to a request that would queue.
type Verdict struct {
	// OK lets it queue; otherwise RetryAfter is when to come back.
	OK         bool
	RetryAfter time.Duration
	// Raised is true when the cap was raised by one for it (see Admit):
	// the caller applies Cap to the limiter at once.
	Raised bool
	Cap    int
}

// Admit answers a request that would have to queue.
//
// First, demand: if the model's plan (see Decide) puts the target above
// the cap, the cap is raised by one at once (if it has not changed for
// settleTime), so that a request never waits behind a cap the model
// already knows to be too low (light load, a burst).
//
// Otherwise the deadline check: the request is refused at once when
//
//	(now - arrival) + bound(ahead) + engine TTFT(cap) > its TTFT target,
//
// since it would miss its target anyway, with the Retry-After that brings
// it back when a slot is predicted to free for it: the release it would
// wait for, counting the requests already told to come back, less half the
// budget T_ttft - engine TTFT that it may spend queued. With nothing
// learned yet it lets everything queue. A request judged by E2E alone
// (one its client does not stream: its targets are its verdict's, an E2E
// target and no TTFT target) has the same check on its E2E target, with
// the P-quantile of its wait and its time on the engine (e2eQuantile) in
// place of bound(ahead) + engine TTFT:
//
//	(now - arrival) + (wait + engine E2E)_P > its E2E target.
//
// Without it such a request queued up to its E2E target (its queue bound)
// and then missed it: with every request of scenario 19 not streamed,
// static caps 1-16 served none within 13 s, waiting 8-13 s in the queue.
//
// For a client not known to retry (not an OpenAI SDK, Query.SDK), a
// refusal may lose the request for good, so with the token budget on the
// engine TTFT above is its own prefill as the engine runs now
// (Query.PrefillOwn), the least it can be, rather than the mean at the
// cap: the limiter refuses it anyway when its turn comes if the prefills
// then under way would make it late (it starts only within its deadline),
// so letting it queue loses nothing it would not lose at once. The mean
// engine TTFT at the cap is every prompt's, long and short and their
// waits behind each other; held to it, a 300-token prompt was refused for
// a predicted 1 s of engine TTFT that it would have met in 10 ms
// (scenario 31 at cap 11, one request queued ahead). A client that
// retries is better told at once when to come back.
//
// Where the request's queue bound (Query.MaxWait: its class's, or the
// operator's) is longer than its target (TTFT, or E2E for one judged by
// it alone), the bound wins: the operator chose to trade first-token time
// for fewer refusals (say for clients that cannot retry), and the request
// is refused at once only when
//
//	(now - arrival) + bound(ahead) > MaxWait,
//
// since the limiter would time it out anyway; otherwise it may wait up to
// the bound and miss its target.
func (c *Controller) Admit(now time.Time, q Query) Verdict {
	if q.Paced {
		return c.admitPaced(now, q)
	}
	if c.raiseOnDemand(now) {
		return Verdict{OK: true, Raised: true, Cap: c.cap}
	}
	budget, byE2E := deadline(q.Targets)
	if budget <= 0 {
		return Verdict{OK: true, Cap: c.cap} // no TTFT or E2E bound: no deadline to miss
	}
	wait, known := c.waitBound(q.Ahead)
	eng := c.engineTTFTOf(now, q.PromptTokens)
	if byE2E {
		wait, eng, known = c.e2eQuantile(q.Ahead)
	} else {
		budget = c.feasibleTTFT(q)
		if !q.SDK && q.PrefillOwn > 0 && c.tokenBudget() {
			eng = q.PrefillOwn // see Admit: a client not known to retry
		}
	}
	if !known {
		return Verdict{OK: true, Cap: c.cap}
	}
	if q.MaxWait > 0 && q.MaxWait > budget {
		if now.Sub(q.Arrival)+wait <= q.MaxWait {
			return Verdict{OK: true, Cap: c.cap}
		}
	} else if now.Sub(q.Arrival)+wait+eng <= budget {
		return Verdict{OK: true, Cap: c.cap}
	}
	if c.raiseForBurst(now) {
		return Verdict{OK: true, Raised: true, Cap: c.cap}
	}
	return Verdict{RetryAfter: c.promise(now, q.Ahead, budget-eng, q), Cap: c.cap}
}

// deadline is the target the deadline check holds a request to: its TTFT
// target, or, judged by E2E alone (no TTFT target), its E2E target
// (byE2E); zero for none.
func deadline(t slo.Targets) (budget time.Duration, byE2E bool) {
	if t.TTFT > 0 {
		return t.TTFT, false
	}
	return max(t.E2E, 0), t.E2E > 0
}

// admitPaced answers a request that finds a slot free but waits for the
// prefill of the request granted before it: it would wait the rest of that
// prefill (the predicted mean engine TTFT less its age) and then its own,
// and is refused at once if that misses its TTFT target.
func (c *Controller) admitPaced(now time.Time, q Query) Verdict {
	t := q.Targets
	if !c.tab.ok || t.TTFT <= 0 {
		return Verdict{OK: true, Cap: c.cap}
	}
	t.TTFT = c.feasibleTTFT(q)
	eng := c.engineTTFTOf(now, q.PromptTokens)
	wait := max(eng-q.PrefillAge, 0)
	if q.PrefillOwn > 0 && !c.cfg.NoTokenBudget {
		// The limiter's token budget: the prefills under way, then its own.
		wait, eng = q.PrefillWait, q.PrefillOwn
	}
	if queueBound(q) || now.Sub(q.Arrival)+wait+eng <= t.TTFT || c.lightLoad(float64(c.cap)/2) {
		return Verdict{OK: true, Cap: c.cap}
	}
	return Verdict{RetryAfter: c.promise(now, q.Ahead, t.TTFT-eng, q), Cap: c.cap}
}

// feasibleTTFT is the TTFT target the deadline check holds a request to:
// its own, or, for a request that would miss it even with the engine to
// itself (by the token model: a prompt too long for the target), what it
// can meet alone and its target more: it may wait as long as a request
// that can meet it. Such a request is never refused for its size alone:
// it is served when the engine has room for it (the limiter's token budget
// starts it when no other prefill is under way), and told to come back
// when it would have to wait longer. (With a tenth of its target instead
// of all of it, scenario 17's flood of 8,000-token prompts was refused at
// every arrival behind the chat's prefills: 0 of 220 served.)
func (c *Controller) feasibleTTFT(q Query) time.Duration {
	t := q.Targets.TTFT
	if c.cfg.NoTokenBudget || q.PromptTokens <= 0 || t <= 0 {
		return t
	}
	if alone, ok := c.tok.prefillOf(q.PromptTokens); ok && alone > t {
		return alone + t
	}
	return t
}

// engineTTFTOf is the predicted mean engine TTFT at the cap of a request
// of p prompt tokens: the level's mean moved by the prefill of its
// difference from the recent requests' mean prompt (0 or no model: the
// level's mean as it is), never below its own prefill alone.
func (c *Controller) engineTTFTOf(now time.Time, p int) time.Duration {
	eng := c.predictedEngineTTFT(now)
	own, ok := c.tok.prefillOf(p)
	if !ok || p <= 0 || c.tok.prompt.w <= 0 || c.cfg.NoTokenBudget {
		return eng
	}
	d := seconds(c.tok.prefill.c[2] * math.Abs(float64(p)-c.tok.prompt.mean()))
	if float64(p) < c.tok.prompt.mean() {
		d = -d
	}
	return max(eng+d, own)
}

// queueBound reports whether the request's own queue bound, longer than
// its TTFT target, decides how long it may queue (see Admit). A paced
// request waits at most a prefill, far below any such bound.
func queueBound(q Query) bool {
	return q.MaxWait > 0 && q.MaxWait > q.Targets.TTFT
}

// PrefillLimit is how many requests may wait for their first token at once
// (see Limiter.SetPacing): as many prefills as fit the TTFT target one
// after another, floor(T_ttft / median engine TTFT), at least 1, with
// hysteresis (it rises only when a quarter more would still fit). Before
// any first token it is 1; with NoPacing it is 0 (pacing off).
func (c *Controller) PrefillLimit() int {
	if c.cfg.NoPacing {
		c.prefills = 0
		return 0
	}
	if c.prefills == 0 {
		c.prefills = 1
	}
	if c.tokenBudget() {
		// The token budget paces prefills by their tokens against each
		// request's deadline: a count of prefills would hold a short
		// prompt back behind a long one that the budget lets it follow.
		c.prefills = 0
		return 0
	}
	if len(c.tab.engineTTFT) < 8 {
		return c.prefills
	}
	ys := make([]float64, len(c.tab.engineTTFT))
	for i, s := range c.tab.engineTTFT {
		ys[i] = s.y
	}
	sort.Float64s(ys)
	med := ys[len(ys)/2]
	if !(med > 0) {
		return c.prefills
	}
	// Bounded: beyond maxPrefills+1 the answer is maxPrefills anyway, and
	// int of a huge float is undefined.
	r := math.Min(c.cfg.TTFT.Seconds()/med, maxPrefills+1)
	switch {
	case int(r+0.25) < c.prefills:
		c.prefills = max(1, int(r+0.25))
	case int(r-0.25) > c.prefills:
		c.prefills = min(maxPrefills, int(r-0.25))
	}
	return c.prefills
}

// raiseOnDemand raises the cap for a request that would queue, as Decide
// would (raiseTo: by up to a quarter), if the model supports it; not while
// the ramp is on (Decide doubles the cap then, and a raise here would hold
// its doubling back by settleTime). By one only, it held a climb to one
// level every settleTime in real time, where a request arrives before
// each decision (1 to 192 in six minutes).
func (c *Controller) raiseOnDemand(now time.Time) bool {
	if c.cfg.Fixed || !c.tab.ok || c.ramp.on || c.cap >= min(c.engineBound(now), c.usefulCap()) || now.Sub(c.changedAt) < settleTime || !c.mayRaiseTo(now, c.cap+1) {
		return false
	}
	pl := c.plan(now)
	if pl.target <= c.cap || pl.gT <= (1+goodputSlack)*pl.gCap || !c.mayLeaveLeft(pl) {
		return false
	}
	old := c.cap
	if c.cap = c.raiseTo(now, pl); c.cap == old {
		return false
	}
	c.changedAt = now // from the left edge (walked), still one level at a time
	c.reason = c.raiseReason(old, pl, " on demand")
	return true
}

// raiseForBurst raises the cap by one for a request that would otherwise
// be refused, under light load (lightLoad: at most half the cap running
// on average, and demand rare), unless the level above is predicted to be
// no operating point at all (minAttainment). Under light load a refusal
// only turns away a request the engine alone would have served, late
// perhaps, and a rare burst does not hold the engine above its knee.
func (c *Controller) raiseForBurst(now time.Time) bool {
	if c.cfg.Fixed || !c.tab.ok || c.cap >= c.engineBound(now) || !c.lightLoad(float64(c.cap)/2) {
		return false
	}
	a := c.attainment(c.op)
	if c.cap+1 >= len(a) || a[c.cap+1] < minAttainment {
		return false
	}
	old := c.cap
	c.cap++
	c.changedAt, c.walked = now, false
	c.reason = fmt.Sprintf("raise %d->%d for a burst: %.1f running on average, predicted attainment at %d %.2f",
		old, c.cap, c.busy.mean(), c.cap, a[c.cap])
	return true
}

// Promise returns the Retry-After for a request refused for another reason
// than the deadline (queue full, queue timeout) with queued requests
// waiting, wait(queued + promised) - budget/2, at least zero (the gateway
// rounds up to whole seconds), and remembers the promise (see promise): it
// is not a query. q says who is refused (see horizon); only its SDK and
// Honoured are read.
func (c *Controller) Promise(now time.Time, queued int, q Query) time.Duration {
	return c.promise(now, queued, c.cfg.TTFT-c.predictedEngineTTFT(now), q)
}

// horizon is how far ahead a slot is promised to q's client: sdkHorizon
// for an SDK while the count binds, else otherHorizon, at most what the
// clients are seen to wait. The count binds while the engine ran at the
// cap within peakMemory, and with ControllerConfig.DecodeStep also while
// the token budget's decode step check held a waiter: it holds the running
// count at the level whose step meets the target, so slots free there as
// they would at a cap of that level. With the decode step learnt without
// prefills, scenario 11's cap stands one above what the step check lets
// run (6 and 5, as the prefix cache slows every step); taken for the
// prefill check's binding, that cut the horizon to 30 s and 5 % more SDK
// requests failed at the same goodput. Without the switch the two agree,
// and counting the step check cost scenario 12 (heavy-tailed prompts) 4 %
// of its goodput over seeds 1-7 (clients sent away past the room that
// freed, as where the prefill check binds).
func (c *Controller) horizon(now time.Time, q Query) time.Duration {
	h := otherHorizon
	held := c.cfg.DecodeStep && !c.stepHeldAt.IsZero() && now.Sub(c.stepHeldAt) < peakMemory
	if q.SDK && (c.peakRun >= c.cap || held) {
		h = sdkHorizon
	}
	if q.Honoured > 0 {
		h = min(h, q.Honoured)
	}
	return h
}

// promise computes a Retry-After and remembers it, so that the next refused
// request is sent to a later release instead of the same one: the k-th
// request refused while k-1 promises are outstanding is told
//
//	Retry-After = wait(ahead + k - 1) - budget/2,
//
// so that it arrives a little before its predicted release and queues for
// at most its budget. A promise is kept until a first token shows that a
// request took a slot (see keepPromise) or it is long overdue.
func (c *Controller) promise(now time.Time, ahead int, budget time.Duration, q Query) time.Duration {
	budget = max(budget, 0)
	live := c.promises[:0]
	for _, p := range c.promises {
		if p.After(now.Add(-2*budget - time.Second)) {
			live = append(live, p)
		}
	}
	c.promises = live
	wait, ok := c.PredictWait(now, ahead+len(c.promises))
	if !ok {
		return time.Second
	}
	if wait <= c.horizon(now, q) {
		c.promises = append(c.promises, now.Add(wait))
	}
	return max(wait-budget/2, 0)
}

// keepPromise drops the earliest outstanding promise when a request takes
// a slot: most likely it was the one told to come back then.
func (c *Controller) keepPromise(now time.Time) {
	if len(c.promises) > 0 && c.promises[0].Before(now.Add(c.cfg.TTFT)) {
		c.promises = c.promises[1:]
	}
}
