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
//     ([Finished], [Load]) and answers ([Decision]); the bounds
//     [DefaultMaxCap] and [CapLimit].
//   - controller_observe.go: what it is told ([Controller.ObserveFirst],
//     ObserveGap, ObserveStep, ObserveEngine, ObserveDone), the shift of a
//     curve, and the measured attainment per level and class of targets.
//   - controller_decide.go: [Controller.Decide], the plan and the moves
//     of the cap; controller_goodput.go: the goodput of each level as the
//     plan weighs it; controller_plateau.go: the plateau of the goodput
//     curve that /status reports and the walk to its left edge;
//     controller_memory.go: what decisions remember between them (failed
//     levels, probes, demand); controller_ramp.go: the ramp from where the
//     controller starts (doubling while the targets hold with margin, then
//     by quarters), the start from the engine's running count, and the
//     [Prior] a state file gives a controller (the engine's token costs).
//   - model*.go: the latency model: per-level forgotten means and fitted
//     curves of the chunk gap and engine TTFT, the spreads, level-local
//     quantiles, shift detection; model_table.go: the per-level predictions.
//   - predict.go: the deadline check ([Controller.Admit], a [Verdict];
//     a request's queue bound longer than its TTFT target replaces it),
//     the predicted wait, the Retry-After promised to refused requests
//     ([Controller.Promise]) and the prefill limit.
//   - loop.go: [Loop], the control loop: a Controller bound to an
//     admission.Limiter, made safe for concurrent use. It decides every
//     Interval and applies the cap, and its Hooks answer the limiter's
//     Gate (Admit) and Refuser (Refused). controller_gaps.go: the queue
//     of chunk observations that found the loop's lock held.
//   - controller_metrics.go, controller_status.go: the kneecap_controller_*
//     metrics and the /status document ([ControllerStatus], [Float]).
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
