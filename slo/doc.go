// Package slo holds the latency targets a request is judged against, the
// per-request measurement record, the judgement itself, and sliding-window
// statistics (percentiles, goodput, attainment) over recent records.
//
// # Overview
//
//   - targets.go: [Targets] (TTFT, TPOT, E2E bounds; zero means "not set")
//     and [Targets.WithHeaders], which applies a request's x-slo-*-ms
//     overrides.
//   - record.go: [Record], everything measured about one request, and
//     [Outcome], the judgement: good, or a set of missed targets, or one of
//     the failure classes (rejected, engine_error, client_cancelled,
//     invalid_request). Outcome.String doubles as the metric label.
//   - judge.go: [Judge], the pure function from a Record and its Targets to
//     an Outcome, with vLLM's definitions (TTFT to the first chunk carrying
//     output; TPOT = (E2E - TTFT) / (output_tokens - 1)). A request the
//     client did not stream is judged as its client felt it, by E2E alone
//     ([Targets.Verdict], [Record.VerdictTargets]), even when the gateway
//     measured its TTFT and TPOT from a stream it asked the engine for
//     (Record.Reassembled).
//   - window.go: [Window], sliding-window statistics kept in DDSketches
//     (github.com/DataDog/sketches-go, 1 % relative accuracy) in time
//     buckets, and [Stats], a snapshot of them.
//
// The definitions follow vLLM's benchmark: TTFT runs from the moment the
// request arrived at the gateway (queue wait included) to the first chunk
// that carries output; engine TTFT runs from forwarding instead. TPOT
// excludes the first token and needs at least two output tokens, counted
// from the engine's usage report. ITL is each gap between successive output
// chunks, pooled over requests. E2E runs from arrival to the last output.
// Goodput is good completions per second of wall time; failed and rejected
// requests are never good.
//
// # Concurrency model
//
// Targets, Record, Outcome and Judge are values and pure functions. A
// Window is safe for concurrent use: one mutex guards its buckets, and each
// observation holds it for a sketch insert only. Every method that depends
// on time takes now as an argument, so tests step through fixed instants.
//
// # Ownership
//
// A Record is built by the proxy goroutine serving its request and handed to
// observers by value once the request ends. A Window owns its sketches;
// [Window.Stats] returns copies of the numbers only.
package slo
