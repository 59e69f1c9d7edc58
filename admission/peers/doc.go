// Package peers holds the concurrency-limit algorithms a user would pick
// instead of kneecap's controller, as pure logic, so the scenario suite can
// run them on the same path:
//
//   - [Envoy]: the gradient controller of Envoy's adaptive concurrency
//     filter with its defaults ([NewEnvoy], "envoy-gradient"), or its
//     pinned-gradient controller with the minimum RTT fixed
//     ([NewEnvoyPinned], "envoy-pinned");
//   - [Gradient2]: Netflix concurrency-limits' Gradient2Limit with its
//     defaults ([NewGradient2], "netflix-gradient2");
//   - [AIMD]: Netflix concurrency-limits' AIMDLimit with its defaults
//     ([NewAIMD], "netflix-aimd"), or told of missed targets as drops with
//     a floor of 1 ([NewAIMDSLO], "netflix-aimd-slo").
//
// # Overview
//
// Each algorithm sees what it sees in its home: the whole-request latency
// (for a token stream: from forwarding to the last byte, which mostly
// measures how long the answer was), the number in flight, and whether the
// request was dropped. None of them knows TTFT or TPOT. The defaults are
// the libraries' current ones, and each type's doc comment gives its
// formula and the commit of the source it follows. The two configurations
// a careful user would pick in front of an LLM engine take the targets
// only as configuration: envoy-pinned pins the minimum RTT at the
// whole-request latency a request may take and still meet them, and
// netflix-aimd-slo counts a request that missed one as dropped (the
// caller decides what a drop is, as an application calls the library's
// onDropped).
//
// Why each falls short of the best static cap in the scenario suite
// (docs/scenarios.md has the numbers), although each is run as it runs at
// home (over its limit a request is refused at once):
//
//   - The latency they steer by arrives a whole stream late (seconds
//     to minutes), so every move of the limit is judged on requests
//     admitted under an older limit: AIMD adds 1 per success and takes
//     10 % off per drop, so the drops from one overshoot keep coming
//     after the limit came down and drive it to the floor (a sawtooth
//     between 1 and about 9 where the knee is 6).
//   - Envoy's 100 ms update window holds one sample of a 10 s stream or
//     none, so the limit moves by up to 2x per completion; its minimum
//     RTT is re-measured at a limit of 3 for 50 requests, which on 10 s
//     streams takes about 100 s of every 165.
//   - Envoy's burst headroom (limit + sqrt(limit)) settles where the
//     median latency is about 1.5 times the minimum RTT, so pinning it at
//     the latency the targets allow holds the limit where most requests
//     miss them.
//   - Gradient2 and AIMD's defaults never go below a limit of 20, above
//     the knee of these engines; Gradient2 also tolerates 1.5x its
//     long-term latency before it shrinks.
//
// # Concurrency model
//
// None is safe for concurrent use; time is an argument. The caller
// (scenarios) serialises calls and applies Limit to a resizable limiter.
//
// # Ownership
//
// Owned by the adaptive-admission work stream. Nothing in the gateway
// depends on this package; it exists for comparison.
package peers

import "time"

// Algorithm is a limit algorithm driven by whole-request latency.
type Algorithm interface {
	// Name is the peer's name in tables and JSON.
	Name() string
	// Sample records one finished request: its latency, the number of
	// requests in flight when it finished, and whether it was dropped
	// (failed or timed out).
	Sample(now time.Time, rtt time.Duration, inflight int, dropped bool)
	// Tick lets time-driven algorithms (Envoy's windows) advance.
	Tick(now time.Time)
	// Limit is the current concurrency limit.
	Limit() int
}
