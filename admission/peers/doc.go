// Package peers holds the concurrency-limit algorithms a user would pick
// instead of kneecap's controller, as pure logic with their published
// defaults, so the scenario suite can run them on the same path:
//
//   - [Envoy]: the gradient controller of Envoy's adaptive concurrency filter;
//   - [Gradient2]: Netflix concurrency-limits' Gradient2Limit;
//   - [AIMD]: Netflix concurrency-limits' AIMDLimit.
//
// # Overview
//
// Each algorithm sees what it sees in its home: the whole-request latency
// (for a token stream: from forwarding to the last byte, which mostly
// measures how long the answer was), the number in flight, and whether the
// request was dropped. None of them knows TTFT, TPOT or the targets. Their
// formulas and defaults are in their doc comments, with the source.
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
