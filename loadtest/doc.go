// Package loadtest is the real-time load test: the real gateway
// (gateway.New with the settings `kneecap serve` parses) over TCP on
// 127.0.0.1 in front of an engine with a load model, driven by bench with
// 16 closed-loop users and the targets TTFT 500 ms and TPOT 25 ms, as a
// new user tries kneecap in front of a llama.cpp server. It measures what
// the users get (goodput, refusals, failed requests) and what the gateway
// leaves idle: its slot time left idle while demand waited, queued or
// refused and away for its Retry-After (admission.Limiter.Outside).
//
// # Overview
//
//   - engine.go: the stacks ([Stack]): the test engines on cpp-httplib and
//     uvicorn as processes (testengine.Launch) with the load model
//     [EngineLoad] (4 slots, a token time growing with the requests
//     running and the KV tokens resident, prefills that stall the others;
//     llama.cpp's kept cells on httplib), and the simulator in this
//     process with [Profile], the same numbers as a sim.Profile, in
//     llama.cpp's flavour. The [Workload]: 160-240-word prompts, 80-120
//     output tokens.
//   - run.go: a [Case] (stack, [Mode], [Clients], timing, seed) and
//     [Case.Run]: a fresh engine, a fresh gateway (none for the engine
//     alone), the users, and the gateway's limiter sampled every 50 ms.
//     The modes are the issue's: the engine alone with 4 users, adaptive,
//     static caps 2-5, static cap 3 without the token budget; the clients
//     honour Retry-After up to 5 s and send their next request
//     ([RetryAfter5s]), or retry the same request twice as the OpenAI SDKs
//     do ([SDK]).
//   - frontend.go: the gateway of a run, the sampler, and the check of
//     /status admission.outside and the kneecap_admission_* metrics
//     against the limiter.
//   - result.go: [Result], from the bench's records over the measured
//     window and the gateway's samples at the window's ends, and the
//     checks that hold whatever the controller's tuning (Result.Problems).
//   - report.go: [Cases], [RunAll] (runs at once, each its own engine,
//     gateway and users), the Markdown [Table] and the JSON.
//
// TestLoad (CI, under -race) runs six short cases at once, about 35 s;
// TestLoadFull (KNEECAP_LOADTEST=full, scripts/load-test) every stack,
// mode and client policy with 30 s of warm-up and a 60 s window
// (docs/load-test.md).
//
// # Concurrency model
//
// Case.Run is synchronous: it starts the engine (a process, or the
// simulator's two goroutines), the gateway's Run goroutine and a sampler
// goroutine, runs bench.Run in its own goroutine, and stops them all,
// gateway before engine, before it returns. RunAll runs cases in
// goroutines of its own, at most atOnce at a time, and returns when all
// have ended. Nothing outlives either.
//
// # Ownership
//
// A run owns its engine, gateway, sampler and the users' transport; the
// Result belongs to the caller. Traffic goes only to 127.0.0.1.
package loadtest
