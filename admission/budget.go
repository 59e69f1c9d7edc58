package admission

import (
	"time"
)

// Costs are what the engine's work costs, as a controller learned them
// from the stream (see SetCosts): with them the limiter holds a budget in
// tokens beside the count cap. The zero value knows nothing and holds
// nothing back: only the count cap and the prefill limit apply.
type Costs struct {
	// PrefillBase, PrefillSteps and PrefillPerToken (seconds per prompt
	// token) predict how long the engine takes to prefill a batch of
	// prompts once they reach it: PrefillBase + PrefillSteps x the decode
	// step then (the step under way, and their own step's decoding of the
	// running requests) + PrefillPerToken x their tokens. Zero
	// PrefillPerToken: unknown, no prefill check.
	PrefillBase     time.Duration
	PrefillSteps    float64
	PrefillPerToken float64
	// PrefillMargin multiplies every predicted prefill (the model's error
	// at the percentile); below 1 means 1.
	PrefillMargin float64
	// The decode step: StepBase + StepPerRunning x running +
	// StepPerKVToken (seconds) x resident KV tokens. StepLimit is the
	// longest step at which the running requests still meet their TPOT
	// targets at the percentile; zero means no step check.
	StepBase, StepPerRunning time.Duration
	StepPerKVToken           float64
	StepLimit                time.Duration
	// StallPerRunning is what each running request adds to another's time
	// per token by the prefill that admits it (the step check weighs
	// step + running x StallPerRunning against StepLimit).
	StallPerRunning time.Duration
	// HiddenKV is the KV tokens the engine holds beyond its running
	// requests' own (finished requests' cells, as llama.cpp's unified
	// cache keeps them), read from its metrics; they slow every step.
	HiddenKV int
	// MeanOutput is the output tokens expected of a request that gives no
	// bound (Request.MaxOutput 0), and the most expected of one that does.
	MeanOutput int
	// OversizeShare is the share of the engine's time (0 to 1) that
	// requests too long to meet their TTFT target even alone may take in
	// prefill: each such request spends its predicted prefill from a credit
	// that grows at this share of the time passed (up to oversizeCredit),
	// and starts only when the credit covers it (or is full) and no other
	// prefill is under way. 0 means no bound (they start whenever no other
	// prefill is under way).
	OversizeShare float64
	// MaxPrefillTokens, when positive, is a static bound on the prompt
	// tokens in the prefill phase (granted without a first token yet, and
	// queued): a request that would take them beyond it is refused at once
	// (ErrQueueFull), as vLLM's --max-num-queued-tokens refuses. It is not
	// learned: an operator's setting of a fixed budget.
	MaxPrefillTokens int
}

// prefillOf is the predicted time to prefill prompts of p tokens with a
// decode step of step, with the margin (see PrefillMargin).
func (c Costs) prefillOf(p int, step time.Duration) time.Duration {
	return seconds(max(c.PrefillMargin, 1) * c.prefillSeconds(p, step))
}

// prefillMean is prefillOf without the margin: the model's prediction.
func (c Costs) prefillMean(p int, step time.Duration) time.Duration {
	return seconds(c.prefillSeconds(p, step))
}

func (c Costs) prefillSeconds(p int, step time.Duration) float64 {
	return c.PrefillBase.Seconds() + c.PrefillSteps*step.Seconds() + c.PrefillPerToken*float64(max(p, 0))
}

// Step is the predicted decode step with n requests running whose KV
// tokens are kv, and the engine's hidden ones (HiddenKV), 0 when the step
// is unknown.
func (c Costs) Step(n, kv int) time.Duration {
	return c.step(n, kv+c.HiddenKV)
}

// StepWith is Step once a request that adds add KV tokens runs too. The
// hidden tokens are room it may take: an engine that keeps finished
// requests' cells (llama.cpp's unified cache) evicts an idle slot's for a
// new request, so the engine then holds the larger of the two, not their
// sum; an engine whose hidden tokens are 0 (vLLM, SGLang) holds both.
func (c Costs) StepWith(n, kv, add int) time.Duration {
	return c.step(n+1, kv+max(c.HiddenKV, add))
}

func (c Costs) step(n, total int) time.Duration {
	return c.StepBase + time.Duration(n)*c.StepPerRunning + seconds(c.StepPerKVToken*float64(total))
}

// overPrefillTokens reports whether a request of prompt tokens would take
// the tokens in the prefill phase (prefilling, and queued) beyond
// MaxPrefillTokens.
func (b *budget) overPrefillTokens(now time.Time, prompt, queued int) bool {
	if b.costs.MaxPrefillTokens <= 0 {
		return false
	}
	in := queued + prompt
	if b.livePrefills(now) > 0 {
		for _, t := range b.prefilling {
			in += t.est
		}
	}
	return in > b.costs.MaxPrefillTokens
}

// knowsPrefill reports whether the prefill check applies.
func (c Costs) knowsPrefill() bool { return c.PrefillPerToken > 0 }

func seconds(s float64) time.Duration {
	const maxDur = float64(1000 * time.Hour)
	ns := s * float64(time.Second)
	switch {
	case !(ns > 0):
		return 0
	case ns > maxDur:
		return time.Duration(maxDur)
	}
	return time.Duration(ns)
}

// Hold reasons: why the next waiter was not granted a slot (see
// HeldCounts). A waiter counts once per reason that held it.
const (
	heldCount   = iota // every slot taken (the count cap)
	heldPacing         // the prefill limit (SetPacing)
	heldPrefill        // its prefill would end past its or another's TTFT deadline
	heldStep           // the decode step with it would exceed StepLimit
	heldReserve        // slots held back for refused requests' return
	heldReasons
)

// HeldCounts counts the waiters that were held back, once per reason that
// held each: the cap, the prefill limit, the prefill budget (tokens in
// prefill against TTFT deadlines), the step budget (KV tokens against TPOT
// targets), and reservations for refused requests.
type HeldCounts struct {
	Cap, Pacing, Prefill, Step, Reserved int64
}

// candidate is what the budget weighs of a request: its deadline for the
// first token (zero: none), its prompt and expected output in tokens.
type candidate struct {
	deadline time.Time
	prompt   int
	output   int
	tpot     time.Duration // its TPOT target (0: none)
	// back is how often it was refused before: a request come back goes
	// before those that come for the first time (see fairQueue.push);
	// retries its client's count of its attempts (Request.Retries).
	back, retries int
	since         time.Time // its first refusal (zero: none)
}

// candidateOf is req as the budget weighs it.
func candidateOf(req Request) candidate {
	c := candidate{prompt: max(req.PromptTokens, 0), output: max(req.MaxOutput, 0), back: req.refusals, retries: req.Retries, since: req.since}
	if req.Targets.TTFT > 0 {
		c.deadline = req.Arrival.Add(req.Targets.TTFT)
	}
	c.tpot = req.Targets.TPOT
	return c
}

// budget is what the engine holds through the limiter and whether a
// request may add to it: the count of slots (the cap), the prefills under
// way (counted for at most prefillBound each, at most maxPrefill of them
// when paced), and, once Costs are known, the engine's work in tokens (the
// prefill pipeline against TTFT deadlines, the decode step against
// StepLimit). It is guarded by the limiter's lock; the count of held slots
// is the limiter's atomic.
type budget struct {
	limit        int
	maxPrefill   int
	prefillBound time.Duration
	prefilling   []*Ticket // granted, no first token yet, oldest first
	costs        Costs
	// credit is the prefill time requests too long for their target may
	// still take (see Costs.OversizeShare), as of creditAt.
	credit   time.Duration
	creditAt time.Time
	held     [heldReasons]int64
	// seq numbers the grants; firsts are the tickets whose first token
	// came within the last half decode step, the latest last (see
	// prefilled).
	seq    uint64
	firsts []*Ticket
	// short are the running short answers (see stallFits).
	short []*Ticket
	// activity is what Limiter.PrefillDuring reads without the lock.
	activity *prefillActivity
}

func newBudget(limit int) budget {
	return budget{limit: max(limit, 1), activity: &prefillActivity{}}
}

// livePrefills drops the tickets whose prefill bound has passed and
// returns how many still wait for their first token.
func (b *budget) livePrefills(now time.Time) int {
	i := 0
	for i < len(b.prefilling) && b.prefillBound > 0 && !now.Before(b.prefilling[i].prefillUntil) {
		b.prefilling[i].prefilling = false
		i++
	}
	if i > 0 {
		b.prefilling = append(b.prefilling[:0], b.prefilling[i:]...)
		b.ended(now, i)
	}
	return len(b.prefilling)
}

// room is how many requests like c would be granted now, one after
// another, beside running slots held (resident KV tokens theirs): none
// unless c fits now (fits); then as many as the count cap leaves, the
// prefill limit lets start, the decode step holds with each one's KV
// tokens (stepFits), and, with the prefill costs known, whose prefills
// one after another end before c's deadline.
func (b *budget) room(now time.Time, c candidate, running, resident int) int {
	if ok, _ := b.fits(now, c, running, resident, 0, true); !ok {
		return 0
	}
	n := b.limit - running
	if b.maxPrefill > 0 {
		n = min(n, b.maxPrefill-b.livePrefills(now))
	}
	if b.costs.knowsPrefill() && !c.deadline.IsZero() {
		if one := b.costs.prefillOf(c.prompt, b.costs.Step(running, resident)); one > 0 {
			n = min(n, max(1, int(c.deadline.Sub(now)/one)))
		}
	}
	each := c.prompt + b.expectedOutput(c)/2
	for k := 1; k < n; k++ {
		if !b.stepFits(c, running+k, resident+k*each) {
			return k
		}
	}
	return max(n, 0)
}

// paceFree reports whether the prefill limit lets one more prefill start.
func (b *budget) paceFree(now time.Time) bool {
	return b.maxPrefill == 0 || b.livePrefills(now) < b.maxPrefill
}

// fits reports whether c may start now with running slots held (resident
// KV tokens theirs) and reserved more held back from it, and if not the
// reason. With paced false the prefill limit is not asked (a waiter at its
// queue-wait bound, see expireLocked).
func (b *budget) fits(now time.Time, c candidate, running, resident, reserved int, paced bool) (bool, int) {
	switch {
	case running >= b.limit:
		return false, heldCount
	case paced && !b.paceFree(now):
		return false, heldPacing
	case running+reserved >= b.limit:
		return false, heldReserve
	case !b.prefillFits(now, c, running, resident):
		return false, heldPrefill
	case !b.stepFits(c, running, resident), !b.stallFits(now, c, running, resident):
		return false, heldStep
	}
	return true, 0
}

// oversizeCredit bounds the credit of prefill time for requests too long
// for their target: a burst of them after a quiet spell takes at most this,
// and one longer than it starts when the credit is full (the credit goes
// below zero). At 5 s, with a prefill model that counts a batch's prompts
// (an 8,000-token prompt alone predicted 2.4 s, not 3.1 s), two prompts of
// scenario 17's flood started back to back at its start where one had,
// and the chat's answers running through both stalls missed their TPOT
// target (24-31 at the flood's start to 7-11, seeds 1 and 4; 1.5 % of
// goodput with today's clients over seeds 1-4); bursts of heavy-tailed
// long prompts did as much in 12 (seeds 1-24: 1.079 good req/s with
// today's clients and 1.010 with the SDKs' at 2 s, 1.031 and 0.975 at
// 5 s). And a prompt longer than 5 s alone never started.
const oversizeCredit = 2 * time.Second

// refill adds to the credit the share of the time since it was last
// refilled.
func (b *budget) refill(now time.Time) {
	if b.creditAt.IsZero() {
		b.creditAt, b.credit = now, oversizeCredit
		return
	}
	if dt := now.Sub(b.creditAt); dt > 0 {
		b.credit = min(b.credit+time.Duration(b.costs.OversizeShare*float64(dt)), oversizeCredit)
		b.creditAt = now
	}
}

// oversizeFits reports whether a doomed request's prefill fits the credit:
// the credit covers it, or is full.
func (b *budget) oversizeFits(now time.Time, c candidate) bool {
	if b.costs.OversizeShare <= 0 {
		return true
	}
	b.refill(now)
	return b.credit >= min(b.costs.Alone(c.prompt), oversizeCredit)
}

// doomed reports whether c would miss its TTFT deadline even with the
// engine to itself: such a request starts only when no other prefill is
// under way (it is never refused for its size, only kept from spoiling
// others' first tokens).
func (b *budget) doomed(now time.Time, c candidate) bool {
	return b.costs.knowsPrefill() && !c.deadline.IsZero() && now.Add(b.costs.Alone(c.prompt)).After(c.deadline)
}

// Alone is the predicted TTFT on the engine of a prompt of p tokens with
// the engine to itself: no other request running, none of its own.
func (c Costs) Alone(p int) time.Duration {
	return c.prefillOf(p, c.step(1, p))
}

// late reports whether c, about to be granted, is predicted to miss its
// TTFT deadline even so: its own prefill as the engine runs now ends past
// it. A doomed request (see doomed) is never late: it misses whenever it
// starts. Without the prefill costs nothing is late.
func (b *budget) late(now time.Time, c candidate, running, resident int) bool {
	if !b.costs.knowsPrefill() || c.deadline.IsZero() || b.doomed(now, c) {
		return false
	}
	own := b.costs.prefillOf(c.prompt, b.costs.StepWith(running, resident, c.prompt))
	return now.Add(own).After(c.deadline)
}

// prefillFits is the prefill check. The engine prefills the prompts that
// wait for it together, in its next step: the oldest prefill under way is
// taken to have started once a decode step has passed since its grant, and
// the others (and c) to form the next batch, which starts when it ends
// and takes PrefillBase + PrefillPerToken x its tokens. c fits if that
// batch ends before c's deadline and before the deadline of every member
// it would push past one. With no prefill under way anything fits; a
// doomed c (see doomed) fits only then.
func (b *budget) prefillFits(now time.Time, c candidate, running, resident int) bool {
	if !b.costs.knowsPrefill() {
		return true
	}
	if b.doomed(now, c) {
		return b.livePrefills(now) == 0 && b.oversizeFits(now, c)
	}
	if b.livePrefills(now) == 0 {
		return true
	}
	step := b.costs.Step(running, resident)
	start, batch := b.nextBatch(now, step)
	tokens := 0
	for _, t := range batch {
		tokens += t.est
	}
	end := start.Add(b.costs.prefillOf(tokens, step))
	endWith := end.Add(seconds(max(b.costs.PrefillMargin, 1) * b.costs.PrefillPerToken * float64(c.prompt)))
	if !c.deadline.IsZero() && endWith.After(c.deadline) {
		return false
	}
	for _, t := range batch {
		if !t.deadline.IsZero() && !end.After(t.deadline) && endWith.After(t.deadline) {
			return false // c would push it past its deadline
		}
	}
	return true
}

// nextBatch returns when the engine's next prefill batch is predicted to
// start and the tickets already waiting for it (see prefillFits).
func (b *budget) nextBatch(now time.Time, step time.Duration) (time.Time, []*Ticket) {
	first := b.prefilling[0]
	if step <= 0 {
		step = b.costs.PrefillBase
	}
	if now.Sub(first.granted) < step {
		return now, b.prefilling // nothing has started yet: all in one batch
	}
	end := first.granted.Add(b.costs.prefillOf(first.est, step))
	if end.Before(now) {
		end = now
	}
	return end, b.prefilling[1:]
}

// prefillWait is the predicted time from now until a prefill of c could
// start without pushing anyone past a deadline: the end of the batch under
// way and the one waiting (0 with none, or before Costs are known).
func (b *budget) prefillWait(now time.Time, running, resident int) time.Duration {
	if !b.costs.knowsPrefill() || b.livePrefills(now) == 0 {
		return 0
	}
	step := b.costs.Step(running, resident)
	start, batch := b.nextBatch(now, step)
	if len(batch) == 0 {
		return start.Sub(now)
	}
	tokens := 0
	for _, t := range batch {
		tokens += t.est
	}
	return start.Add(b.costs.prefillOf(tokens, step)).Sub(now)
}

// stepFits is the step check: the decode step with c among the running
// requests (resident holds their prompts and output so far; c adds its
// prompt and half its expected output) stays within StepLimit. With
// nothing running anything fits.
func (b *budget) stepFits(c candidate, running, resident int) bool {
	if b.costs.StepLimit <= 0 || running == 0 {
		return true
	}
	step := b.costs.StepWith(running, resident, c.prompt+b.expectedOutput(c)/2)
	return step+time.Duration(running+1)*b.costs.StallPerRunning <= b.costs.StepLimit
}

// expectedOutput is c's expected output tokens: its bound, at most the
// mean output of requests without one.
func (b *budget) expectedOutput(c candidate) int {
	switch m := b.costs.MeanOutput; {
	case c.output == 0:
		return m
	case m > 0:
		return min(c.output, m)
	}
	return c.output
}

// take counts a granted ticket: prefilling until its first token, running
// until its release. It records on the ticket the prefill work ahead of it.
func (b *budget) take(now time.Time, t *Ticket, running, resident int) {
	if n := b.livePrefills(now); n > 0 {
		for _, p := range b.prefilling {
			t.aheadTokens += p.est
		}
		t.aheadSpan = now.Sub(b.prefilling[0].granted)
	}
	t.step = b.costs.Step(running, resident)
	b.seq++
	t.seq = b.seq
	if b.costs.knowsPrefill() {
		// Its prefill after those under way (see prefillWait), as
		// predicted now: the span of a traced request shows it.
		t.predTTFT = b.prefillWait(now, running, resident) + b.costs.prefillOf(t.est, b.costs.StepWith(running, resident, t.est))
	}
	if b.costs.knowsPrefill() && !t.deadline.IsZero() && now.Add(b.costs.Alone(t.est)).After(t.deadline) && b.costs.OversizeShare > 0 {
		b.refill(now)
		b.credit -= b.costs.Alone(t.est) // too long for its target: it spends the credit
	}
	t.prefilling = true
	// It counts as prefilling until its first token, for at most the
	// bound, or twice its own predicted prefill where that is longer (a
	// long prompt is still being prefilled past a TTFT target it cannot
	// meet). Tickets end in grant order, as the list is kept.
	t.prefillUntil = now.Add(max(b.prefillBound, 2*b.costs.prefillOf(t.est, t.step)))
	if n := len(b.prefilling); n > 0 && t.prefillUntil.Before(b.prefilling[n-1].prefillUntil) {
		t.prefillUntil = b.prefilling[n-1].prefillUntil
	}
	b.prefilling = append(b.prefilling, t)
	b.activity.open.Add(1)
}

// firstToken takes t out of the prefills under way at now; it reports
// whether t was one.
func (b *budget) firstToken(now time.Time, t *Ticket) bool {
	if !t.prefilling {
		return false
	}
	t.prefilling = false
	for i, p := range b.prefilling {
		if p == t {
			b.prefilling = append(b.prefilling[:i], b.prefilling[i+1:]...)
			b.ended(now, 1)
			break
		}
	}
	return true
}

// release forgets t at now.
func (b *budget) release(now time.Time, t *Ticket) {
	b.firstToken(now, t)
	b.releaseShort(t)
}

// hold counts w as held for reason, once per reason.
func (b *budget) hold(w *waiter, reason int) {
	if w.held&(1<<reason) == 0 {
		w.held |= 1 << reason
		b.held[reason]++
	}
}
