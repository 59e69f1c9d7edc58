// Package testengine runs test inference engines on the engines' own HTTP
// stacks as real processes, so that tests see the connection, timeout and
// fault behaviour of the servers a gateway really fronts.
//
// # Parts
//
//   - engines/uvicorn_engine.py: a FastAPI app served by uvicorn as vLLM serves it
//     (timeout_keep_alive=5), streaming vLLM-shaped chunks. Run by Debian's
//     /usr/bin/python3 (python3-fastapi, python3-uvicorn).
//   - engines/httplib_engine.cpp: a cpp-httplib server with the library's defaults
//     (libcpp-httplib-dev), streaming llama.cpp-shaped chunks and, like
//     llama.cpp, closing the connection after every streamed response.
//   - testengine.go: [Start] starts an engine; [Engine] kills, restarts and
//     inspects it. [Launch], [Engine.Close], [Engine.RestartErr] and
//     [Engine.StatsErr] do the same outside a test (tools/soak), on the same
//     code.
//   - load.go: [Load], the load model of an engine started [WithLoad]
//     (off by default): slots beyond which requests wait in the engine, a
//     time per output token that grows with the requests running and the
//     KV tokens resident (kept after a request ends, as llama.cpp's
//     unified cache, with KeepKV), and prefills that stall the others.
//     Both engines implement it (class Load, struct Load) from the same
//     command-line flags.
//   - build.go: what Start runs: the uvicorn engine's script written out,
//     the httplib engine compiled with g++, each once per source and cached
//     on disk across processes. The sources are embedded; they sit in
//     engines/ because the go command refuses C++ files in the directory of
//     a package without cgo.
//
// Both engines serve POST /v1/chat/completions and /v1/completions, GET
// /health, /v1/models and /test/stats, and take one request's behaviour from
// its headers (and, with a load model, from the engine's load):
// [HeaderFirstDelay], [HeaderGap], [HeaderTokens],
// [HeaderLogprobs], [HeaderToolCalls] and [HeaderFault] with a Fault* mode.
// The uvicorn engine echoes the traceparent a generation request came with
// in [HeaderTraceparent].
// A request's answer that is not streamed is the one its stream adds up
// to, in the form the engine gives it: vLLM's model_dump of its response
// (every field, nulls included; the uvicorn engine also honours "n") and
// llama.cpp's to_json_oaicompat (timings, prompt_tokens_details), so that a
// gateway's answer reassembled from the stream can be compared with it
// field by field. GET /metrics answers the engine's Prometheus exposition
// (vLLM's names on uvicorn, llama.cpp's on httplib, following the requests
// being served, or the load model's slots and KV tokens), or, for an engine started [WithMetricsFault], fails for
// its whole life: missing, a 30 s hang, 50 MiB of garbage, or NaN values
// (the Metrics* modes).
//
// # Ownership
//
// An [Engine] owns its processes: exactly one goroutine per process calls
// cmd.Wait and one reads its stdout, and both end when the process does.
// The test that called Start owns the Engine; its Cleanup kills the process
// and waits for both goroutines. A program that called Launch owns it the
// same way and calls Close. The engine's counters (/test/stats) belong
// to the engine process and start from zero after a Restart. Engine methods
// are safe for concurrent use.
package testengine
