// Package proxytest provides test doubles for the gateway's tests and
// benchmarks.
//
// # Overview
//
//   - engine.go: [Engine], a fake OpenAI-compatible engine that speaks the
//     chunk shapes of vLLM, SGLang and llama.cpp's server, with chunks of
//     several tokens, paced output, an engine that answers before reading
//     the body, and one that never reports usage. It generates no text:
//     every output chunk carries TokensPerChunk words. (The realistic
//     engine with a latency model is the simulator in package sim.)
//   - pipe.go: [PipeListener], a net.Listener over net.Pipe, so that a
//     client, the gateway and an engine can run in one testing/synctest
//     bubble in virtual time.
//   - mem.go: [MemEngine], a RoundTripper that answers every request with
//     one SSE body from memory, and [DiscardWriter], a flushing
//     ResponseWriter that drops its bytes: the benchmarks of the relay and
//     of the whole gateway measure CPU without I/O with them.
//
// # Concurrency model
//
// An Engine serves each request on its server goroutine; its counters are
// atomics. A PipeListener hands each dialled connection to Accept through
// a channel; it starts no goroutines.
//
// # Ownership
//
// The caller owns both and closes the listener (and the idle connections
// of any Transport made from it) when done.
package proxytest
