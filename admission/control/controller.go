package control

import (
	"time"

	"github.com/kneecap/kneecap/slo"
)

// ControllerConfig sets the adaptive controller. The zero value of every
// field means its default.
type ControllerConfig struct {
	// TTFT, TPOT and E2E are the operator's targets: the class of requests
	// that carry none of their own (the proxy gives those the operator's
	// targets), the one Decide holds at the percentile, and the TTFT bound
	// of prefill pacing and Retry-After. Zero TTFT means 1s, zero TPOT
	// 100ms, zero E2E no E2E target. (The targets a request carries are
	// taken as they are: a zero there is no bound.)
	TTFT, TPOT, E2E time.Duration
	// Percentile is the share of requests whose latencies must meet the
	// targets at the chosen cap (0.9: P90 within targets).
	Percentile float64
	// MinCap (default 1) and MaxCap (default DefaultMaxCap) bound the cap.
	MinCap, MaxCap int
	// InitialCap is the cap before anything was measured (default MinCap).
	// The cap grows from there with demand, one request at a time, as the
	// model learns; starting low keeps a start-up burst of prefills from
	// teaching the model latencies that steady state does not have.
	InitialCap int
	// Fixed keeps the cap at InitialCap: the model still learns and the
	// deadline check and Retry-After still use it, but Decide never moves
	// the cap (KNEECAP_MAX_CONCURRENCY set).
	Fixed bool
	// NoPacing turns prefill pacing off: PrefillLimit is then 0 and the
	// limiter grants any free slot at once (KNEECAP_PREFILL_PACING=false).
	NoPacing bool
	// Memory is the time constant over which the model forgets (default
	// 60s); a detected shift cuts the old memory to a tenth of its weight.
	Memory time.Duration
	// Interval is how often Run calls Decide (default 1s).
	Interval time.Duration
	// NoTokenBudget keeps the limiter's budget in requests only: the model
	// of the engine's costs in tokens is still learned (and shown), but
	// not handed to the limiter (KNEECAP_TOKEN_BUDGET=false).
	NoTokenBudget bool
	// DecodeStep learns the decode step from the chunk gaps with no
	// prefill under way only, and watches it for a shift over every level
	// (stepShift), with the token budget on (KNEECAP_DECODE_STEP=true; off
	// by default): see decodeGap for why, and docs/datacenter.md for what
	// it gains and the checks of the suite it still misses.
	DecodeStep bool
	// NoCachedCost makes the token model learn prefill from whole prompts.
	// By default it learns from their uncached part (the engine's usage
	// count less the cached tokens it reported), the part the engine
	// prefilled, and the mean prompt from what admission charged
	// (slo.Record.PromptCharged) (KNEECAP_CACHED_COST=false).
	NoCachedCost bool
	// Prior, when set and valid, seeds the token model with costs a
	// previous controller learnt on the same engine (a state file).
	Prior *Prior
}

func (c ControllerConfig) withDefaults() ControllerConfig {
	if c.TTFT <= 0 {
		c.TTFT = time.Second
	}
	if c.TPOT <= 0 {
		c.TPOT = 100 * time.Millisecond
	}
	if c.Percentile <= 0 || c.Percentile >= 1 {
		c.Percentile = 0.9
	}
	if c.MinCap < 1 {
		c.MinCap = 1
	}
	if c.MaxCap <= 0 {
		c.MaxCap = DefaultMaxCap
	}
	c.MaxCap = max(c.MaxCap, c.MinCap)
	if c.InitialCap <= 0 {
		c.InitialCap = c.MinCap
	}
	c.InitialCap = max(c.MinCap, min(c.InitialCap, c.MaxCap))
	if c.Memory <= 0 {
		c.Memory = time.Minute
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	return c
}

// Finished is what the controller learns from one completed request.
type Finished struct {
	// Running is the mean number of requests running on the engine over the
	// request's decode (or, if unknown, the count at its first token).
	Running float64
	// EngineTTFT is forwarding to first output; TPOT is vLLM's
	// (E2E - TTFT)/(output_tokens - 1), zero with fewer than 2 tokens.
	EngineTTFT, TPOT time.Duration
	// Hold is how long the request held its slot (forwarding to end).
	Hold time.Duration
	// OutputTokens is the engine's usage count.
	OutputTokens int
	// Targets are the targets the request was judged by: the operator's
	// with the request's own overrides applied, as the proxy records them,
	// and of those, for a request that was not streamed, the ones its
	// verdict used (slo.Record.VerdictTargets). A zero field is no bound
	// on that latency (an x-slo-*-ms: 0 header, or a target a request
	// that is not streamed is not judged by), not the operator's target.
	Targets slo.Targets
	// Good reports whether the request met all its targets as the client
	// felt them (queue wait included); kept for the measured attainment.
	Good bool
	// PromptTokens is the engine's count of the prompt (usage), and
	// PromptEstimate the gateway's estimate before the engine answered:
	// the part the engine prefilled and admission charged (less its cached
	// tokens) unless ControllerConfig.NoCachedCost.
	PromptTokens, PromptEstimate int
	// PrefillAhead, PrefillSpan and PrefillStep are the prefill work ahead
	// of the request when it was granted and the decode step predicted
	// then (see admission.Ticket.PrefillAhead); PrefillWith the prompt
	// tokens prefilled with it that were granted after it
	// (admission.Ticket.PrefillWith).
	PrefillAhead, PrefillWith int
	PrefillSpan, PrefillStep  time.Duration
	// GrantRunning is the requests holding a slot when it was granted,
	// itself included (0: unknown).
	GrantRunning int
}

// Load is the limiter's view since the previous Decide.
type Load struct {
	// Running and Queued are the counts now.
	Running, Queued int
	// PeakRunning and PeakQueued are the highest counts seen since the
	// previous Decide; Rejected is the number of requests refused since.
	PeakRunning, PeakQueued, Rejected int
	// ShortTenant is true when a tenant runs every request it has and
	// fewer than its share beside other tenants
	// (admission.State.TenantShort): while most decisions see one, the
	// cap may walk further left for it, to the plateau's fair edge.
	ShortTenant bool
	// BoundedTenant is true when such a tenant runs no more than every
	// tenant with more demand than it runs (admission.State.TenantBounded):
	// a raise slows it to serve one no worse off, so it must grow the
	// goodput faster than the level (max-min).
	BoundedTenant bool
	// StepHeld is true when the limiter held a waiter back for its token
	// budget's decode step check since the previous Decide
	// (admission.HeldCounts.Step): with the decode step switch, the
	// running count binds there as the cap would (see horizon).
	StepHeld bool
}

// clean makes every count at least 0: the limiter never reports fewer, and
// a negative count would read as light load or as free slots.
func (l Load) clean() Load {
	l.Running, l.Queued = max(l.Running, 0), max(l.Queued, 0)
	l.PeakRunning, l.PeakQueued, l.Rejected = max(l.PeakRunning, 0), max(l.PeakQueued, 0), max(l.Rejected, 0)
	return l
}

// Decision is the outcome of one Decide.
type Decision struct {
	Cap     int
	Changed bool
	// Reason explains the cap (the last change, or why it holds).
	Reason string
}

// Controller chooses the concurrency cap from live measurements. It is pure
// logic: every method takes the time as an argument and it starts nothing.
// It is not safe for concurrent use; the Loop serialises calls.
//
// What it learns, each sample tagged with n, the requests running on the
// engine at that moment:
//
//   - the gap between output chunks of running streams (live, every chunk):
//     the decode step, gap(n) = a + b n, memory-bandwidth bound (weights
//     plus the KV cache of n sequences), fitted over forgotten per-level
//     means, each level's own mean taking over where it has samples;
//   - engine TTFT at each first output chunk: its P-quantile and median at
//     n from the samples near n (prefills collide more often as n grows,
//     so the spread is level-dependent), moved along a mean curve that
//     grows with the step time;
//   - finished requests: TPOT / gap(n), the spread of TPOT around the step
//     time (stalls by a neighbour's prefill, chunks of several tokens), the
//     output length and the targets each request carried (classes).
//
// From these, per level n: the predicted attainment A(n) (share of
// requests meeting every target of their class), the mean slot hold
// Hold(n) = TTFT + (output - 1) TPOT, and goodput G(n) = n / Hold(n) A(n)
// (Little's law). Decide keeps the cap at the largest level within 3 % of
// the best goodput among those with A >= P and, under sustained demand,
// walks it to the plateau's left edge (tick_walk.go); it moves it
// in bounded steps with hysteresis (see Decide and its stages, tick.go). A shift in the step time or engine TTFT at
// the cap's level cuts the memory. Admit is the deadline-aware queue:
// predicted wait + engine TTFT against the request's TTFT target, and a
// Retry-After that is the predicted time until a slot frees.
type Controller struct {
	cfg ControllerConfig
	op  slo.Targets // the operator's targets (cfg's, with defaults)

	gap, ttft    *curve // mean per-chunk gap and engine TTFT against running
	gapShift     *shiftDetector
	ttftShift    *shiftDetector
	stepShift    stepShift  // the decode step over the token model's, pooled over the levels
	tpotR, ttftR *ratioRing // spread of finished TPOT, of engine TTFT
	outTokens    *ratioRing // output tokens of recent requests (raw)
	ttftSamples  *sampleRing
	tab          table
	tok          *tokens // the engine's costs in tokens (the token budget)
	limit        engineLimit
	holdAvg      decayed // mean slot hold, measured
	idle         decayed // time a freed slot waits for a request under demand
	// busy is the mean number of requests running, sampled at each
	// Decide, and pressure the share of decisions that saw demand; they
	// tell light load (see lightLoad).
	busy, pressure decayed
	// peakRun is the most requests that ran at once within the last
	// peakMemory, and when: with the token budget, a raise past a quarter
	// above it would lift a cap nothing reaches (see usefulCap).
	peakRun   int
	peakRunAt time.Time
	// stepHeldAt is when a decision last saw the step check hold a waiter
	// (Load.StepHeld).
	stepHeldAt time.Time
	// unusedSince is since when every decision saw demand while the cap
	// stood above usefulCap (see boundByBudget); zero: not now.
	unusedSince time.Time
	// dwell[n]: seconds the cap held n (w) and good completions then (sum).
	dwell          perLevel
	lastDwell      time.Time
	goodSince      int
	good, finished decayed // measured attainment
	classes        map[slo.Targets]*decayed
	// measured[t][n]: requests of class t that ended while the cap held n
	// (w) and how many of them met every target as the client felt them
	// (sum); see attainment.
	measured map[slo.Targets]perLevel

	cap         int
	prefills    int // the prefill limit (see PrefillLimit)
	reason      string
	changedAt   time.Time
	shiftAt     time.Time // requests started before it straddle the shift
	stepShiftAt time.Time // the last shift of the time per token (see evidenceAtCap)
	// failed remembers the levels the cap was lowered from: raising back to
	// one waits a backoff that doubles with each failure there.
	failed     map[int]failure
	probes     map[int]failure // probes from each level (shouldProbe)
	shifts     int
	lastShift  string
	promises   []time.Time // Retry-After times promised to rejected requests
	lastDecide time.Time
	plat       plateau  // the last decision's plateau (see planTick, tick_plan.go)
	walked     bool     // the cap walked to the left edge and holds there (mayLeaveLeft)
	fairWalk   bool     // the walk went past the left edge for a short tenant (mayWalkBack)
	short      decayed  // the share of decisions that saw a short tenant (Load.ShortTenant), over shortMemory
	bounded    decayed  // the share of decisions that saw a bounded or short tenant, over shortMemory
	boundedNow bool     // the last decision saw one
	smooth     perLevel // each plateau level's goodput averaged over leftMemory (noteLeft)
	ramp       ramp     // the slow start (controller_ramp.go)
	// engineSeen is set by the first reading of the engine's metrics, and
	// engineRunning is what it ran then (see startFromEngine).
	engineSeen    bool
	engineRunning int
	startChecked  bool
}

// NewController returns a controller at cfg.InitialCap. It starts nothing.
func NewController(cfg ControllerConfig) *Controller {
	cfg = cfg.withDefaults()
	tau := cfg.Memory
	c := &Controller{
		cfg:         cfg,
		op:          slo.Targets{TTFT: cfg.TTFT, TPOT: cfg.TPOT, E2E: cfg.E2E},
		gap:         newCurve(cfg.MaxCap+1, tau, 200),
		ttft:        newCurve(cfg.MaxCap+1, tau, 20),
		gapShift:    newShiftDetector(cfg.MaxCap+1, tau, shiftShort, shiftBand, shiftMinShort, shiftMinLong),
		ttftShift:   newShiftDetector(cfg.MaxCap+1, tau, 15*time.Second, 1.35, 6, 15),
		tpotR:       newRatioRing(256, 2*tau),
		ttftR:       newRatioRing(256, 2*tau),
		outTokens:   newRatioRing(256, 2*tau),
		ttftSamples: newSampleRing(64, tau),
		tok:         newTokens(tau, cfg.Percentile),
		classes:     map[slo.Targets]*decayed{},
		measured:    map[slo.Targets]perLevel{},
		dwell:       perLevel{},
		smooth:      perLevel{},
		failed:      map[int]failure{},
		probes:      map[int]failure{},
		cap:         cfg.InitialCap,
		prefills:    1,
		reason:      "initial",
	}
	// A chunk's gap ages the same spans in the gap curve and its shift
	// detector, a first chunk's TTFT in the TTFT curve and its detector.
	c.gap.memo, c.ttft.memo = &expMemo{}, &expMemo{}
	c.gapShift.memo, c.ttftShift.memo = c.gap.memo, c.ttft.memo
	c.ttft.xOf, c.ttft.prior = c.gap.at, 1
	if cfg.Fixed {
		c.reason = "fixed by the operator"
	}
	if p := cfg.Prior; p != nil && p.Valid() {
		c.tok.seed(*p)
	}
	c.startRamp()
	return c
}

// Cap returns the current cap.
func (c *Controller) Cap() int { return c.cap }

// Config returns the configuration with defaults applied.
func (c *Controller) Config() ControllerConfig { return c.cfg }
