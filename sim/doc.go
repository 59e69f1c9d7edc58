// Package sim is a simulated OpenAI-compatible inference engine that
// generates no real text but schedules and times its work like a
// continuous-batching engine (vLLM), so that latency gets worse under load
// the way a real engine's does. It is what tests, demos and benchmarks of
// the knee run against when there is no GPU.
//
// # Overview
//
//   - profile.go: [Profile], the engine being simulated (memory limits,
//     token budget, step costs, an optional prefix cache whose resident
//     tokens slow every step, optionally as llama.cpp's unified cache:
//     cells kept per slot until it is reused or the room is needed), the
//     built-in profiles, the calibration workloads ([Table1Workload],
//     [SecondWorkload]), heavy-tailed (log-normal) lengths in [Workload],
//     and [Profile.Solo], what a request alone can meet, to set targets
//     relative to a profile.
//   - engine.go: the scheduler and step model, pure and clock-free: each
//     step decodes one token for every running sequence and prefills prompt
//     chunks under a token budget; max_num_seqs and a KV-cache capacity
//     bound the batch; the waiting queue is FCFS; when KV runs out the
//     newest running sequence is preempted and recomputed.
//   - prefix.go: the hashed prefix cache of vLLM and SGLang
//     (Profile.PrefixCaching): prompts named block by block by a chain
//     hash while they are parsed, blocks held by running sequences and
//     kept after they end until the room is needed (least recently freed
//     first); a hit skips that prefill and is reported in usage.
//   - sim.go: [Sim], [Config] and [Faults]: the scheduler loop [Sim.Run]
//     that sleeps each step's modelled duration, the run-time step
//     factor [Sim.SetStepFactor] and [Sim.FlushCache].
//   - handler.go, request.go, flavor.go, flavor_extra.go: the HTTP routes
//     ([Sim.Handler]), request parsing and the prompt-token rule (one token
//     per whitespace-separated word; token-ID arrays count their length),
//     and the chunk shapes and the non-streamed answer of each [Flavor]
//     (the answer is what the stream adds up to, in its engine's form),
//     encoded by appending bytes; the vllm flavour also answers logprobs
//     and a tool call (tool_choice "required" or named) when asked.
//   - metrics.go: the flavour's Prometheus series (vllm:*, sglang:* or
//     llamacpp:*), KV usage counted as each engine counts it.
//
// # Concurrency model
//
// One goroutine runs [Sim.Run]: per step it plans under Sim.mu, sleeps
// once with the standard time package (so testing/synctest virtualizes it),
// and commits under Sim.mu. Each request is served on its handler's
// goroutine, which enqueues its sequence under Sim.mu and then waits on the
// sequence's one-slot channel; the loop publishes tokens to it through
// atomics, so handlers never take the engine lock per token. With
// Config.Stagger a woken handler then sleeps until its turn in the step's
// output (batch order, Stagger apart), so that in a synctest bubble no two
// streams receive a step's chunk at the same instant. The package
// starts no other goroutines and has no package-level mutable state; when
// Run returns, every request still in the engine ends with an error.
//
// # Ownership
//
// The engine state (queues, KV accounting, the prefix cache, the random
// generator) belongs to the Sim and is guarded by Sim.mu; a sequence's
// scheduler fields belong to the engine (its cached count is read by its
// handler only after the done state was stored), its published token count
// and state to whoever reads them atomically. The handler owns the response writer. The Prometheus registry
// is injected through [Config.Registry] (or owned by the Sim when nil).
package sim
