// Package trace reads request traces and turns them into a bench workload
// that replays them open loop: each request at its own arrival time, with
// its own prompt and output lengths, and prompts that share text where the
// trace says they share a prefix.
//
// # Overview
//
//   - trace.go: [Trace] and [Request] (arrival since the trace's start,
//     prompt and output tokens, prefix block ids), [Read] and [ReadFile],
//     which detect the format ([Format]) and report bad input as an
//     [*Error] naming the file, line and field; [Trace.Window],
//     [Trace.Scale] and [Trace.CheckContext].
//   - formats.go: the three formats. kneecap's request log (package
//     reqlog: one line per request, written as requests end, so sorted by
//     arrival here); the Azure LLM inference trace CSV
//     (TIMESTAMP,ContextTokens,GeneratedTokens); Mooncake's JSONL
//     (timestamp in ms, input_length, output_length, hash_ids of 512-token
//     blocks).
//   - replay.go: [Replay], the bench.Config hooks of a trace: the gaps
//     between arrivals (bench.Config.Interarrival) and each request's
//     prompt ([Prompt]: block id h is BlockTokens deterministic words
//     drawn from h, the last block cut to the prompt's length, so an
//     engine's prefix cache sees the trace's reuse; the simulator counts
//     one token a word).
//
// # Concurrency model
//
// A Trace is read once and then only read. The Interarrival hook keeps a
// counter and is called by bench's one dispatcher goroutine; the Workload
// is safe for concurrent use (it reads the trace by the slot's sequence
// number).
//
// # Ownership
//
// The caller owns the Trace; Replay reads it and never changes it.
package trace
