// Package control is the adaptive controller: it learns from live
// measurements how the engine's latency grows with the number of running
// requests, predicts per level the share of requests that meet their
// targets and the goodput, and decides the concurrency cap, the prefill
// limit, the deadline check and Retry-After. It enforces nothing itself:
// package admission (the limiter) does, and this package reaches it only
// through SetLimit, SetPacing and the limiter's hooks. It imports admission
// (for the limiter and its hook types) and slo, and nothing above them: the
// gateway adapts its proxy's observations to the Loop's methods.
//
// # Overview
//
//   - controller.go: [Controller], the decisions as pure logic (every
//     method takes the time), its [ControllerConfig], what it is told
//     ([Finished], [Load]) and answers ([Decision]).
//   - constants.go: every tuned constant, grouped by stage, each with why
//     it has its value; the bounds [DefaultMaxCap] and [CapLimit].
//   - controller_observe.go: what it is told between decisions
//     ([Controller.ObserveFirst], ObserveGap, ObserveStep, ObserveEngine,
//     ObserveDone): the samples of the model, the classes of targets and
//     the measured attainment per level and class; engine_limit.go: the
//     engine's own limit, from its metrics.
//   - tick*.go: one decision ([Controller.Decide], a tick), a pipeline
//     of five stages in tick.go, one file each (below).
//   - model*.go: the latency model: per-level forgotten means and fitted
//     curves of the chunk gap and engine TTFT, the spreads, level-local
//     quantiles, shift detection, the engine's costs in tokens
//     (model_tokens.go); model_table.go: the per-level predictions, read
//     through predict and attainment.
//   - controller_ramp.go: the ramp from where the controller starts
//     (doubling while the targets hold with margin, then narrowing), the
//     start from the engine's running count, and the [Prior] a state file
//     gives a controller (the engine's token costs).
//   - predict.go: the deadline check ([Controller.Admit], a [Verdict];
//     a request's queue bound longer than its TTFT target replaces it),
//     the raise for a request that would queue and for a burst, the
//     predicted wait, the Retry-After promised to refused requests
//     ([Controller.Promise]) and the prefill limit.
//   - loop.go: [Loop], the control loop: a Controller bound to an
//     admission.Limiter, made safe for concurrent use. It decides every
//     Interval and applies the cap, and its Hooks answer the limiter's
//     Gate (Admit) and Refuser (Refused). controller_gaps.go: the queue
//     of chunk observations that found the loop's lock held.
//   - controller_metrics.go, controller_status.go: the kneecap_controller_*
//     metrics and the /status document ([ControllerStatus], [Float]).
//
// # A decision, stage by stage
//
// Decide (tick.go) passes a tick through five stages, in this order, and
// each stage owns the state it writes:
//
//  1. observe (tick_observe.go): the interval since the last decision.
//     It owns the time the cap held each level under demand and the good
//     completions then (dwell), the running count, the share of
//     decisions with demand and the recent peak (busy, pressure,
//     peakRun, and when the budget's step check last held a waiter:
//     stepHeldAt), the slot time left idle while requests waited (idle), the
//     shares of decisions that saw a tenant held short or bounded, and
//     the ramp's accounting (requests refused, idle slot time).
//  2. model (tick_model.go): a shift of either latency at the cap, or of
//     the decode step over every level (stepShift, model_stepshift.go),
//     the refit of the curves and the token model, and the per-level
//     table.
//     It owns the curves, the shift detectors, the token model and the
//     table; a shift also clears what was learnt in the old regime
//     (dwell, measured attainment, idle, failed and probed levels, the
//     walk and its averages).
//  3. plan (tick_plan.go): the target level, the goodput of each level,
//     the classes of targets weighed, the plateau and its left edges, and
//     whether the cap misses P with evidence at the cap. It owns the
//     plateau of the last decision and the averaged goodput per level the
//     left edge is taken from (smooth), and caches the attainment per
//     class until the next refresh or change of the cap.
//  4. move (tick_move.go, controller_ramp.go, tick_walk.go): exactly one
//     move, each a function returning the new cap and the reason: hold,
//     the ramp's doubling or narrowing step, lower for missing P, lower for
//     goodput, raise, probe, the walk to the plateau's left edge and
//     back. Before any plan come the moves no plan overrules (overrule in
//     tick.go): a fixed cap, the engine's own limit, a cap the token
//     budget leaves unused, the start from the engine's running count,
//     nothing learnt yet. The moves change none of the state the apply
//     stage sets; the ramp ends itself when a doubling is refused.
//  5. apply (tick.go): the cap, the reason, the time of the change
//     (changedAt), the levels lowered from for missing P or probed from
//     (failed, probes), the walk (walked, fairWalk), the ramp's last
//     doubling and its end on a lowering, and the [Decision].
//
// Between decisions, Admit (predict.go) may raise the cap for a request
// that would queue (raiseOnDemand, through the plan and raiseTo) or for a
// burst under light load (raiseForBurst); it sets the cap, the reason and
// changedAt itself (a burst also ends the walk), and the next decision
// starts from there.
//
// Priority classes (package admission's ClassConfig) are not the
// controller's target classes: the controller groups finished requests by
// the targets their verdict used (slo.Record.VerdictTargets: every target
// of a stream, the E2E target alone of a request its client did not
// stream), whatever their priority, and a request with no
// target at all (a batch class without targets) teaches the model its cost
// on the engine but counts to no class, attainment or measured goodput
// (see Controller.ObserveDone), so the cap stays where the requests with
// targets meet them.
//
// # Concurrency model
//
// A Controller is not safe for concurrent use and starts nothing. A Loop
// is: one mutex serialises the controller's computation, and Run (its only
// goroutine, started by its owner) ends with its context. What a decision
// sets off (the limiter's cap and prefill limit, log lines, OnChange) runs
// after that mutex is released, in decision order under a second one, so a
// request's deadline check never waits for a log write or a callback. A chunk observation never
// waits for that mutex: one that finds it held is queued and applied by
// the next holder before anything else, so every decision sees every
// chunk observed before it.
//
// # Ownership
//
// The Loop owns its Controller. The limiter belongs to its owner (the
// gateway), which installs the Loop's Hooks on it once; the Loop changes
// the limiter only through SetLimit and SetPacing.
package control
