// Package bench is a load generator and report for any OpenAI-compatible
// streaming endpoint: an engine directly, or the kneecap gateway in front of it.
//
// # Overview
//
// [Run] drives one or more load levels against Config.BaseURL and returns a
// [Report]: per level, every request's timeline ([Record]) and a [Summary]
// with vLLM's definitions (the brief's): TTFT is from the moment a request
// was due to its first chunk carrying output; TPOT is
// (E2E - TTFT) / (output_tokens - 1) with output_tokens from the engine's
// usage report (stream_options.include_usage is always requested), and a
// request with one output token has none; ITL is every gap between
// successive output chunks, pooled; E2E is from due to the last output
// chunk. Goodput is the rate of completed requests that met every target
// at once; rejections (429) and failures are counted apart and are never
// good.
//
//   - config.go: [Config], [Targets], [Dist], flag-style parsers.
//   - workload.go: the [Workload] hook (what to send, per request, may change
//     mid-run) with [Synthetic] (N-word prompts, seeded lengths) and
//     [PromptFile] (JSONL).
//   - client.go: one request, measured into a [Record]: streamed, or sent
//     with "stream": false (Config.NoStream, Request.NoStream), as the
//     OpenAI SDKs send it, measured by E2E to the end of its answer and
//     judged by E2E alone (Record.Judge, as the gateway judges it).
//   - run.go, loops.go: levels, warm-up, the measured window, closed loop
//     (users, optionally honouring Retry-After) and open loop (Poisson or
//     gamma arrivals, or Config.Interarrival's; latencies counted from when
//     a request was due; a refusal handled by Config.Clients: the SDKs'
//     retries, or given up).
//   - summary.go: percentiles, rates, goodput and the knee.
//   - timeline.go, caps.go: a level over time ([Level.Timeline]: offered,
//     good, late, refused and failed requests a second per bucket, and the
//     gateway's cap read from Config.CapURL, its /status, once a second),
//     as a table and a plot; what a trace's replay (package bench/trace,
//     Config.EndWithArrivals) reports.
//   - table.go, json.go, plot.go, progress.go: the report as text, JSON with
//     vLLM's field names, a PNG/SVG picture, and progress output.
//
// The measured window of a level starts after its warm-up and ends after
// Config.Duration, or once Config.Requests requests have ended inside it.
// Rates and percentiles are over the requests that ended inside the window
// (a time slice, as a sliding-window gateway sees it); requests still in
// flight when the level ends are cancelled and reported as unfinished.
//
// # Concurrency model
//
// Run is synchronous. Each level starts one goroutine per closed-loop user,
// or one dispatcher plus one goroutine per in-flight open-loop request, and
// waits for all of them before the next level starts; nothing outlives Run.
// Only the standard time package is used (time.Now, timers), with no other
// clock, so Run works inside a testing/synctest bubble over net.Pipe
// connections when Config.Client dials them. Records are appended under one
// mutex per level; Workload.Next may be called from several goroutines at once
// and gets its own seeded *rand.Rand per caller, so a run is repeatable.
//
// # Ownership
//
// Run owns everything it creates. The Report and its Records belong to the
// caller once Run returns. The *http.Client is borrowed, never closed.
package bench
