package control

import (
	"math"
	"time"

	"github.com/kneecap/kneecap/admission"
)

// tokens is the engine's cost in tokens, learned from the stream: what the
// limiter's token budget weighs (admission.Costs). Where the count model
// (gap and TTFT against the running count) sees a level, this one sees a
// request:
//
//   - prefill: the time the engine takes to prefill the prompts before a
//     request's first token, against how many tokens they hold,
//
//     TTFT_i + span_i = base + perToken x (ahead_i + prompt_i)
//
//     where prompt_i is the request's own prompt (the engine's usage
//     count), ahead_i the prompts (estimated) still waiting for their first
//     token when it was granted, and span_i the time since the oldest of
//     them was granted: with nothing ahead it is the request's own engine
//     TTFT, and with chunked prefill (several steps per prompt) the line
//     holds as well. Fitted by least squares over forgotten samples.
//
//   - step: the gap between two output chunks against the requests running
//     and the KV tokens resident (their prompts and output so far, plus
//     what the engine holds of finished requests, where it publishes it),
//
//     gap = s0 + s1 x running + s2 x kv,
//
//     the decode step of a memory-bandwidth-bound engine: the weights read
//     once, then each sequence and each resident token. Prefill stalls (a
//     gap over outlierFactor times the prediction) are left out.
//
//   - the mean prompt (estimate) and output of recent requests.
type tokens struct {
	tau     time.Duration
	prefill planeFit   // engine TTFT + span against (the decode step then, prompt tokens)
	spread  *ratioRing // measured prefill / the model's, for the margin
	p       float64    // the percentile the margin is taken at
	step    planeFit
	prompt  decayed // estimated prompt tokens of recent requests
	// promptNow is the mean estimated prompt of the last promptCount or
	// so (an exponential mean by count, 0 before the first).
	promptNow float64
	hidden    decayed // KV tokens the engine holds beyond its running requests' (its metrics)
	// kvPerRunning is the mean resident KV tokens per running request
	// (over the last few hundred chunks), and runningNow the resident KV
	// tokens at the last chunk.
	kvPerRunning float64
	runningNow   float64
}

func newTokens(tau time.Duration, p float64) *tokens {
	return &tokens{tau: tau, spread: newRatioRing(256, 2*tau), p: p}
}

// observePrefill learns from a finished request's first token: step is
// the decode step the budget predicted at its grant (0: unknown).
func (k *tokens) observePrefill(now time.Time, engineTTFT, span, step time.Duration, ahead, prompt int) {
	if engineTTFT <= 0 || prompt <= 0 || span < 0 || ahead < 0 || step < 0 {
		return
	}
	y := (engineTTFT + span).Seconds()
	if k.prefill.ok {
		k.spread.add(now, ratio(y, k.prefill.at(step.Seconds(), float64(ahead+prompt))))
	}
	k.prefill.add(now, k.tau, step.Seconds(), float64(ahead+prompt), y)
}

// margin is the P-quantile of measured prefill over the model's (the
// arrival phase within a step, a chunk of output, a batch the engine
// formed otherwise), at least 1 and at most 2: the budget multiplies its
// predicted prefill ends by it.
func (k *tokens) margin(now time.Time) float64 {
	return math.Min(math.Max(quantile(k.spread.values(now), k.p, 1, 3, 20), 1), 2)
}

// observePrompt learns the size of a request that was admitted.
func (k *tokens) observePrompt(now time.Time, estimate int) {
	if estimate > 0 {
		x := float64(estimate)
		k.prompt.add(now, k.tau, x)
		if k.promptNow == 0 {
			k.promptNow = x
		}
		k.promptNow += (x - k.promptNow) / promptCount
	}
}

// observeStep learns from one chunk gap with running requests and kv
// tokens resident (the running requests' own). It returns the gap over the
// step the model predicted for it, or 0 (none learnt yet, or the gap was
// left out).
func (k *tokens) observeStep(now time.Time, running, kv int, gap time.Duration) float64 {
	y := gap.Seconds()
	if y <= 0 || running < 1 || kv < 0 {
		return 0
	}
	x := float64(kv) + k.hidden.mean()
	r := 0.0
	if k.step.ok {
		m := k.step.at(float64(running), x)
		if y > outlierFactor*m {
			return 0 // a prefill stall, not a decode step
		}
		if m > 0 {
			r = y / m
		}
	}
	per := float64(kv) / float64(running)
	if k.kvPerRunning == 0 {
		k.kvPerRunning = per
	}
	k.kvPerRunning += (per - k.kvPerRunning) / 256
	k.runningNow = float64(kv)
	k.step.add(now, k.tau, float64(running), x, y)
	return r
}

// observeEngineKV learns from the engine's own count of resident KV
// tokens, read from its metrics, against the gateway's count of its
// running requests' (resident): the difference, when positive, is what the
// engine holds that the gateway cannot see (finished requests' cells in a
// unified cache).
func (k *tokens) observeEngineKV(now time.Time, engine float64, resident int) {
	if !finite(engine) || engine < 0 {
		return
	}
	k.hidden.add(now, hiddenMemory, math.Max(engine-float64(resident), 0))
}

// refit refits both models at now.
func (k *tokens) refit(now time.Time) {
	k.prefill.fit(now, k.tau)
	k.step.fit(now, k.tau)
}

// prefillOf is the predicted prefill of p tokens alone, or false before
// the model knows.
func (k *tokens) prefillOf(p int) (time.Duration, bool) {
	if !k.prefill.ok || k.prefill.c[2] <= 0 {
		return 0, false
	}
	return k.costs(0, 0).Alone(p), true
}

// costs are the model as the limiter's token budget: stepLimit is the
// longest decode step the targets allow (0: none), meanOutput the mean
// output of recent requests.
func (k *tokens) costs(stepLimit time.Duration, meanOutput float64) admission.Costs {
	var c admission.Costs
	if k.prefill.ok && k.prefill.c[2] > 0 {
		c.PrefillBase, c.PrefillSteps, c.PrefillPerToken = seconds(k.prefill.c[0]), k.prefill.c[1], k.prefill.c[2]
		c.PrefillMargin = k.margin(k.prefill.t)
	}
	if k.step.ok {
		c.StepBase, c.StepPerRunning, c.StepPerKVToken = seconds(k.step.c[0]), seconds(k.step.c[1]), k.step.c[2]
		c.StepLimit = stepLimit
	}
	c.HiddenKV = int(math.Min(k.hidden.mean(), math.MaxInt32))
	if meanOutput > 0 {
		c.MeanOutput = int(math.Min(meanOutput+0.5, math.MaxInt32))
	}
	return c
}

// lineFit is y = a + b x, a >= 0 and b >= 0, by least squares over
// samples forgotten with the model's memory.
type lineFit struct {
	w, sx, sy, sxx, sxy float64
	t                   time.Time
	a, b                float64
	ok                  bool
}

func (f *lineFit) decay(now time.Time, tau time.Duration) {
	if f.t.IsZero() {
		f.t = now
		return
	}
	if dt := now.Sub(f.t); dt > 0 {
		d := math.Exp(-float64(dt) / float64(tau))
		f.w, f.sx, f.sy, f.sxx, f.sxy = f.w*d, f.sx*d, f.sy*d, f.sxx*d, f.sxy*d
		f.t = now
	}
}

func (f *lineFit) add(now time.Time, tau time.Duration, x, y float64) {
	if !finite(x) || !finite(y) || x < 0 || y < 0 {
		return
	}
	f.decay(now, tau)
	f.w++
	f.sx += x
	f.sy += y
	f.sxx += x * x
	f.sxy += x * y
}

// fit solves for a and b: least squares where x varied, else through the
// origin (one size seen: all of it per token), clamped to the physics
// (neither a fixed part nor a per-token part is negative).
func (f *lineFit) fit(now time.Time, tau time.Duration) {
	f.decay(now, tau)
	f.ok = false
	if f.w < minLineWeight || f.sxx <= 0 {
		return
	}
	den := f.w*f.sxx - f.sx*f.sx
	a, b := 0.0, f.sxy/f.sxx
	if den > 1e-6*f.w*f.sxx {
		b = (f.w*f.sxy - f.sx*f.sy) / den
		a = (f.sy - b*f.sx) / f.w
		switch {
		case b < 0:
			a, b = f.sy/f.w, 0
		case a < 0:
			a, b = 0, f.sxy/f.sxx
		}
	}
	if finite(a) && finite(b) {
		f.a, f.b, f.ok = a, b, true
	}
}

// planeFit is y = c0 + c1 u + c2 v, every coefficient >= 0, by least
// squares over forgotten samples.
type planeFit struct {
	w       float64
	m       [3][3]float64 // sum of x x^T with x = (1, u, v)
	r       [3]float64    // sum of x y
	t       time.Time
	c       [3]float64
	ok      bool
	samples int
}

func (f *planeFit) decay(now time.Time, tau time.Duration) {
	if f.t.IsZero() || f.w == 0 {
		f.t = now // nothing to age (an engine that reports no tokens)
		return
	}
	if dt := now.Sub(f.t); dt >= decayGrain {
		d := math.Exp(-float64(dt) / float64(tau))
		f.w *= d
		for i := range 3 {
			f.r[i] *= d
			for j := range 3 {
				f.m[i][j] *= d
			}
		}
		f.t = now
	}
}

func (f *planeFit) add(now time.Time, tau time.Duration, u, v, y float64) {
	if !finite(u) || !finite(v) || !finite(y) {
		return
	}
	f.decay(now, tau)
	// The sums of x x^T and x y for x = (1, u, v), written out: a sample
	// per output chunk. Each sum gets exactly the product the loop over x
	// gave it (1 times a value is that value; u v and v u are the same
	// float).
	f.w++
	f.samples++
	f.r[0] += y
	f.r[1] += u * y
	f.r[2] += v * y
	uv := u * v
	f.m[0][0]++
	f.m[0][1] += u
	f.m[0][2] += v
	f.m[1][0] += u
	f.m[1][1] += u * u
	f.m[1][2] += uv
	f.m[2][0] += v
	f.m[2][1] += uv
	f.m[2][2] += v * v
}

// scale multiplies the fit by f (every sample's y, so every coefficient)
// and keeps only share of its weight: after a detected shift the old
// samples stay as a prior, rescaled, while new ones take over.
func (f *planeFit) scale(k, share float64) {
	if !(k > 0) || math.IsInf(k, 0) {
		k = 1
	}
	f.w *= share
	for i := range 3 {
		f.r[i] *= k * share
		for j := range 3 {
			f.m[i][j] *= share
		}
		f.c[i] *= k
	}
}

// at is the fitted value at (u, v).
func (f *planeFit) at(u, v float64) float64 { return f.c[0] + f.c[1]*u + f.c[2]*v }

// fit solves the normal equations over the coefficients that are free,
// dropping (fixing at 0) the last one that comes out negative until all
// are not: the active-set answer to non-negative least squares for three
// unknowns. A coefficient the samples cannot tell apart from the others
// (u and v always in proportion) comes out of a singular system and is
// dropped the same way.
func (f *planeFit) fit(now time.Time, tau time.Duration) {
	f.decay(now, tau)
	f.ok = false
	if f.w < minLineWeight {
		return
	}
	free := [3]bool{true, true, true}
	for range 3 {
		c, solved := f.solve(free)
		if !solved {
			if free[2] {
				free[2] = false
			} else if free[1] {
				free[1] = false
			} else {
				return
			}
			continue
		}
		neg := -1
		for i := 2; i >= 0; i-- {
			if free[i] && c[i] < 0 {
				neg = i
				break
			}
		}
		if neg < 0 {
			f.c, f.ok = c, true
			return
		}
		free[neg] = false
	}
}

// solve solves the normal equations restricted to the free coefficients
// (the others 0) by Gaussian elimination; false when singular.
func (f *planeFit) solve(free [3]bool) ([3]float64, bool) {
	var idx []int
	for i := range 3 {
		if free[i] {
			idx = append(idx, i)
		}
	}
	n := len(idx)
	if n == 0 {
		return [3]float64{}, false
	}
	var a [3][4]float64
	for i, p := range idx {
		for j, q := range idx {
			a[i][j] = f.m[p][q]
		}
		a[i][n] = f.r[p]
	}
	for col := range n {
		piv := col
		for row := col + 1; row < n; row++ {
			if math.Abs(a[row][col]) > math.Abs(a[piv][col]) {
				piv = row
			}
		}
		if math.Abs(a[piv][col]) <= 1e-9*math.Max(1, math.Abs(f.m[idx[col]][idx[col]])) {
			return [3]float64{}, false
		}
		a[col], a[piv] = a[piv], a[col]
		for row := range n {
			if row == col {
				continue
			}
			k := a[row][col] / a[col][col]
			for j := col; j <= n; j++ {
				a[row][j] -= k * a[col][j]
			}
		}
	}
	var c [3]float64
	for i, p := range idx {
		c[p] = a[i][n] / a[i][i]
		if !finite(c[p]) {
			return [3]float64{}, false
		}
	}
	return c, true
}

// tokenGap returns the decode step at each running count as the token
// model predicts it from now, or nil without the token budget or a step
// fit: the requests running now hold resident KV tokens (R at the mean
// running count m), a level n holds n/m of that, and the engine's hidden
// tokens are room the extra requests take before they add to its total
// (see admission.Costs.StepWith): total(n) = max(R n/m, R + hidden). It
// follows what moves the step (the KV cache), where the count model's
// line a + b n follows only what was measured at each level, which a
// filling cache leaves stale.
func (c *Controller) tokenGap(now time.Time) func(n int) float64 {
	k := c.tok
	if !c.tokenBudget() || !k.step.ok || k.kvPerRunning <= 0 {
		return nil
	}
	per, hidden := k.kvPerRunning, k.hidden.mean()
	return func(n int) float64 {
		r := per * float64(n)
		total := math.Max(r, math.Min(r, k.runningNow)+hidden)
		return k.step.at(float64(n), total)
	}
}

// stallPer is the TPOT each running request adds by the prefills that
// stall a request (see spread.stallPer): a mean prompt's prefill work over
// a mean output's tokens after the first. The work is the fit's per-token
// term alone: its base (and the decode steps a prefill waits for) is time
// the prompt waits in the engine, which the running requests do not wait
// for, and early in a run, while the fit is loose, it held most of the
// prefill: counted as stall, it made every level above the one measured
// look worse than it is (scenario 1's cap sat at 4 for two minutes where
// main's count model reached 6 in 14 s). The mean prompt is the larger
// of the minute's and the last hundred's (promptCount) with
// ControllerConfig.DecodeStep, else the minute's. 0 without the token
// budget or before the prefill is learnt.
func (c *Controller) stallPer(outMean float64) float64 {
	if !c.tokenBudget() || outMean <= 1 {
		return 0
	}
	f := c.tok.prefill
	prompt := c.tok.prompt.mean()
	if c.cfg.DecodeStep {
		prompt = math.Max(prompt, c.tok.promptNow)
	}
	return math.Max(f.c[2]*prompt, 0) / (outMean - 1)
}

// tokenBudget reports whether the limiter holds a token budget for
// prefills: the model knows their cost and the budget is not turned off.
func (c *Controller) tokenBudget() bool {
	return !c.cfg.NoTokenBudget && c.tok.prefill.ok && c.tok.prefill.c[2] > 0
}

// Costs returns the token budget the limiter should hold (see
// admission.Limiter.SetCosts): the learned prefill and step costs, the
// longest step at which the operator's TPOT target holds at the
// percentile (the target over the TPOT spread, TPOT_P / step), and the
// mean output. The zero Costs (no token budget) before anything is
// learned, or with NoTokenBudget.
func (c *Controller) Costs() admission.Costs {
	if c.cfg.NoTokenBudget {
		return admission.Costs{}
	}
	var limit time.Duration
	if c.tab.ok && c.tab.s.qTPOT > 0 {
		limit = seconds(c.op.TPOT.Seconds() / c.tab.s.qTPOT)
	}
	k := c.tok.costs(limit, c.tab.s.outMean)
	k.StallPerRunning = seconds(c.tab.s.stallPer)
	k.OversizeShare = oversizeShare
	return k
}

// tokenStatus is the token model for /status.
func (c *Controller) tokenStatus() TokenStatus {
	k := c.Costs()
	if c.cfg.NoTokenBudget {
		k = c.tok.costs(0, c.tab.s.outMean) // shown, not held
	}
	st := TokenStatus{
		Budget:      c.tokenBudget(),
		PrefillBase: Float(k.PrefillBase.Seconds()), PrefillSteps: Float(k.PrefillSteps), PrefillPerToken: Float(k.PrefillPerToken),
		StepBase: Float(k.StepBase.Seconds()), StepPerRunning: Float(k.StepPerRunning.Seconds()),
		StepPerKVToken: Float(k.StepPerKVToken), StepLimit: Float(k.StepLimit.Seconds()),
		HiddenKV: Float(c.tok.hidden.mean()), MeanOutput: Float(c.tab.s.outMean), MeanPrompt: Float(c.tok.prompt.mean()),
	}
	if k.PrefillPerToken > 0 {
		// The longest prompt whose alone TTFT meets the target, by bisection
		// over a model that grows with the prompt.
		lo, hi := 0, 1<<24
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if k.Alone(mid) <= c.op.TTFT {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		st.LongestMeeting = lo
	}
	return st
}
