package control

import "time"

// The controller's constants, grouped by the stage of a decision (see
// tick.go) that uses them, each with why it has its value. They are
// physics and statistics, not per-workload tuning, and are the same in
// every scenario.

// The cap's bounds.

// DefaultMaxCap is the highest cap the controller sets when MaxCap is unset
// (KNEECAP_MAX_CAP): far above any engine's knee, so that it bounds only a
// runaway.
const DefaultMaxCap = 512

// CapLimit is the highest cap a setting may ask for (KNEECAP_MAX_CAP,
// KNEECAP_MIN_CAP, KNEECAP_MAX_CONCURRENCY; gateway.Config.Validate holds
// them to it): four times the largest default
// of vLLM's max_num_seqs (1024 on GPUs of 70 GiB or more, 256 on others),
// the most sequences an engine batches at once. A higher cap bounds
// nothing, and what the controller keeps per level may grow to it.
const CapLimit = 4096

// Observe: what the controller is told between decisions, and what a
// decision notes of the last interval (tick_observe.go).

// maxClasses bounds the target classes the controller keeps (see
// ObserveDone).
const maxClasses = 16

// gapShards spreads the streams that add at the same moment (the Loop's
// queue of chunk observations that found its lock held).
const gapShards = 8

// engineLimitReadings is how many readings in a row the engine must show
// requests waiting while it runs the same number, fewer than the gateway
// forwarded, for that number to be its own limit (a request that arrives
// during a long step waits for the next one: a single reading of a waiting
// request says nothing); engineLimitMemory is how long a limit not seen
// again is kept (see engineLimit).
const (
	engineLimitReadings = 3
	engineLimitMemory   = 10 * time.Minute
)

// idleMemory is the time constant of the measured slot idle time.
const idleMemory = 30 * time.Second

// peakMemory is how long the peak running count is kept (and how long a
// cap must sit unused by the token budget before it comes down to it).
const peakMemory = 30 * time.Second

// lightPressure is the largest share of decisions with demand under which
// the load counts as light.
const lightPressure = 0.1

// shortMemory is the time constant of the share of decisions that saw a
// tenant held below its share by its own demand: a tenant of a few users
// drops below its share for a moment whenever one of its requests ends,
// and the cap follows the share, not each moment.
//
// The walk goes past the left edge while this decision and most recent
// ones saw a short tenant, and back only once almost none did (shortGone):
// at the level where the tenant holds its share it is short now and then
// (whenever one of its requests has ended and the next has not come), and
// a walk back and forth on each would not hold the level.
const (
	shortMemory = 20 * time.Second
	shortGone   = 0.1
)

// Model: the latency model and the per-level table (tick_model.go,
// model*.go).

// tpotPrior and ttftPrior are the spread factors Q_P(r) assumed before
// enough measurements exist.
const tpotPrior, ttftPrior = 1.05, 1.5

// fullGapWeight is the weight at which a level's measured mean gap replaces
// the fitted curve; below it the two are blended in proportion.
const fullGapWeight = 200

// minLevelWeight is the weight below which a level does not count as a
// distinct point for the slope.
const minLevelWeight = 2

// outlierFactor is how far above the expected value a sample is taken for
// an outlier: a chunk gap that held a prefill step rather than a decode
// step (left out of the step curve and of the shift detector's means).
const outlierFactor = 3

// The shift detectors of the time per token (gapShift per level, and
// stepShift pooled over every level): a short window of shiftShort
// against the model's memory, a shift when their ratio leaves
// [1/shiftBand, shiftBand] at two decisions in a row with at least
// shiftMinShort and shiftMinLong samples' weight in the two windows. Three
// seconds hold hundreds of chunk gaps at every level a datacenter engine
// runs, and a quarter is beyond what the KV cache's growth moves a step in
// that time; the engine TTFT's detector (15 s, 1.35, 6 and 15 first
// tokens) stays in controller.go, beside its one use.
const (
	shiftShort    = 3 * time.Second
	shiftBand     = 1.25
	shiftMinShort = 100
	shiftMinLong  = 300
)

// localReach is how far, in running requests, a sample can weigh in
// localQuantile: its weight carries a factor exp(-|n - n_i|), and
// exp(-28) < 1e-12, the weight below which a sample is skipped.
const localReach = 27

// The forgotten count of requests finished at a cap level from which their
// measured attainment is used, and from which it replaces the prediction.
const (
	measuredMin  = 8
	measuredFull = 30
)

// minLineWeight is the forgotten weight of samples a fit needs.
const minLineWeight = 4

// decayGrain is the least time a planeFit ages its sums by: a sample per
// output chunk would otherwise cost an exponential each (at a 60 s memory
// the error is under 2e-4 of a sample's weight).
const decayGrain = 10 * time.Millisecond

// hiddenMemory is the time constant of the hidden KV reading: a few
// scrapes, so that one reading taken between a grant and the engine's
// admission of it does not swing the step budget.
const hiddenMemory = 3 * time.Second

// promptCount is the number of recent prompts the stall term's second
// mean prompt follows (tokens.promptNow, an exponential mean with weight
// 1/promptCount each): the stall term takes the larger of it and the
// minute's mean. When prompts double, the minute's mean takes a minute to
// follow and the stall term, a prefill per running request, trails the
// engine (scenario 25 lost 15 % of its goodput with the minute's mean
// alone once the decode step left the prefills out); a hundred prompts
// are a few seconds of a datacenter engine's traffic, and a single long
// prompt moves the mean by a hundredth of its size.
const promptCount = 100

// priorWeight is the weight of a Prior's samples: a little over what a
// fit needs (minLineWeight), a few seconds of live samples.
const priorWeight = 9

// maxPredicted bounds every predicted duration, far above anything a
// client waits for, so that a prediction from absurd measurements cannot
// overflow a time.Duration.
const maxPredicted = 1000 * time.Hour

// Plan: the target level, the goodput per level, the plateau
// (tick_plan.go).

// hysteresis: raise only to a level whose predicted attainment is at
// least P + hysteresis; lower when the cap's is below P.
const hysteresis = 0.04

// goodputSlack is the relative difference of predicted goodput below which
// two levels count as equal: the cap is raised for goodput only when the
// gain exceeds it (hysteresis; lowering needs moveGain), and of equals
// goodputBest chooses the larger level.
const goodputSlack = 0.03

// goodputOverride is how much more goodput a level missing the percentile
// must promise to be chosen over the best one meeting it (with 10 %, open
// loop at twice the knee, where no cap meets P90, sat at caps 1-2: 0.85 of
// the oracle on seed 1); missTolerance is
// how far below P the cap's predicted attainment may sit (its estimate is
// noisy: from 60 samples, +-0.04) before the cap counts as missing P.
const (
	goodputOverride = 0.05
	missTolerance   = 0.03
)

// Dwell needed before a level's measured goodput is used, and for it to
// replace the prediction; minAttainment is the predicted attainment below
// which a level is never chosen.
const (
	minAttainment = 0.5
	minDwell      = 20 // seconds
	fullDwell     = 60
)

// shiftEvidence is how long after a detected shift of the time per token a
// predicted miss at the cap lowers it without requests finished there.
const shiftEvidence = time.Minute

// tpotEvidence is how far the predicted P-quantile of TPOT at the cap must
// exceed the target for the cap to be lowered before requests finished
// there: the spread of TPOT around the step time is itself learnt from
// finished requests, which a change of the cap disturbs.
const tpotEvidence = 1.25

// leftSlack is how far below the best goodput the left edge may be: less
// than goodputSlack, the gain for which the cap is raised. With 2 % the
// walk cost scenarios 11 and 18 (a slowly drifting engine, and a knee at
// the engine's own slot count) 0.5-1.5 % of their goodput over seeds 1-3;
// with 1 % at most 0.5 %.
const leftSlack = 0.01

// leftMemory is the time constant of the averaged goodput per level that
// the left edge is taken from; leftReach how many levels below the
// plateau of the last prediction are averaged too (the plateau of one
// prediction is as noisy as the prediction).
const (
	leftMemory = 30 * time.Second
	leftReach  = 4
)

// Move: how far and how often the cap moves (tick_move.go,
// controller_ramp.go, tick_walk.go).

// settleTime is the least time between two changes of the cap, so that
// the new level is measured before the next step.
const settleTime = 2 * time.Second

// raiseStep and lowerStep bound a step to a share of the cap (at least 1).
const raiseStep, lowerStep = 0.25, 0.5

// bigViolation is how far below P the cap's attainment must be for it to
// be lowered by lowerStep of the cap; closer to P it is lowered by the
// share of the cap it falls short (moveLower).
const bigViolation = 0.2

// moveGain is the predicted gain of goodput for which the cap moves. Near
// the knee goodput is flat over several levels while its prediction from a
// few dozen first tokens a minute swings by more than that, and every move
// costs: a raise admits a request whose prefill stalls the running ones.
const moveGain = 0.10

// failBackoff is how long a level the cap was lowered from stays barred
// after its first failure; it doubles with each further one, up to
// maxFailBackoff.
const (
	failBackoff    = 30 * time.Second
	maxFailBackoff = 5 * time.Minute
)

// probeBackoff is how long a level waits to be probed from again after
// its first probe (see shouldProbe).
const (
	probeBackoff    = 8 * time.Minute
	maxProbeBackoff = 32 * time.Minute
)

// unusedPressure is the share of the last minute's decisions with demand
// from which a cap the token budget leaves unused comes down, after
// unusedWindow of it.
const (
	unusedPressure = 0.5
	unusedWindow   = 15 * time.Second
)

// Constants of the ramp, and why each has its value.
const (
	// rampMargin is the share of a target the predicted P-quantile of
	// TPOT, engine TTFT and E2E at the doubled level must stay within for
	// the cap to double: past it the ramp narrows (halfway to the first
	// level predicted to miss, rampNarrowStep) from measured
	// levels. With 0.6, on the H100 8B scenario (TPOT target 50 ms) the
	// doublings end at 64, where a static cap still meets P90 by far, and
	// leave the way to 128-200 to measured steps.
	rampMargin = 0.6
	// rampMinRun is the share of the cap that must have run at once since
	// the previous decision for a doubling: the level passed must have
	// been tried by the engine, not only allowed (with the token budget
	// pacing prefills, a cap nothing reaches says nothing).
	rampMinRun = 0.75
	// rampUnfilled is how many decisions in a row with demand the engine
	// may run less than rampMinRun of the cap before the ramp ends: the
	// cap no longer binds (four settle times: a doubling's prefills are
	// paced in within them).
	rampUnfilled = 8
)

// leftDwell is how long the cap holds each level of the walk to the left
// edge before the next step; relearnDwell is how long the cap must have
// held its level under demand since the last detected shift (dwell is
// cleared by one) before the walk starts: until then the cap holds the
// right end, as where the model has relearned the engine.
const (
	leftDwell    = 2 * settleTime
	relearnDwell = 30 // seconds (dwell decays with the memory: 60 s is never reached)
)

// minStreamedShare is the share of streamed requests from which the cap
// walks to the left edge. A request judged by E2E alone gains nothing
// there: by Little's law, at the same goodput, a lower cap moves its time
// from the engine to the queue.
const minStreamedShare = 0.9

// Between decisions: the deadline check, Retry-After, prefill pacing and
// the token budget (predict.go, model_tokens.go), and /status.

// maxPrefills bounds the prefill limit (see PrefillLimit).
const maxPrefills = 64

// How far ahead the controller hands out slots to refused requests: beyond
// its horizon a client is told the predicted wait of the last slot handed
// out, which it waits out and comes back to be told again.
//
// An OpenAI SDK (Query.SDK) honours a Retry-After of up to sdkHorizon,
// and each refusal is one of its three tries: the longer such a client is
// sent away while the slots are taken, the fewer of its tries the wait for
// one uses up. With 30 s instead of 60 s, 64 SDK users at a cap of 5
// failed twice as many requests in their applications at the same
// goodput. So it gets the longer horizon, while the count binds (the
// engine ran at the cap within peakMemory; with the decode step switch
// also while the token budget's step check held a waiter, see horizon):
// slots then free at cap / Hold, and the wait for the k-th is predictable.
// Where the token budget binds instead, slots free as each request's size
// allows, and a wait predicted
// a minute ahead sent clients away past the room that freed for them
// (scenario 16: 8 % less goodput over ten seeds). Other clients get
// otherHorizon: what they honour is not known, and a client told more
// than it waits comes back early and is refused again. Either is never
// longer than the clients are seen to wait (Query.Honoured).
const (
	sdkHorizon   = 60 * time.Second
	otherHorizon = 30 * time.Second
)

// oversizeShare is the share of the engine's time that requests too long
// to meet their TTFT target even alone may take in prefill (see
// admission.Costs.OversizeShare): they are served, never starved, but at a
// tenth of the engine at most while others can meet theirs.
const oversizeShare = 0.1

// maxStatusLevels bounds the levels Status lists, so that the size of
// /status does not grow with MaxCap (up to 4096 by the gateway's settings).
const maxStatusLevels = 64
