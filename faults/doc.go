// Package faults is the fault suite: the real gateway (gateway.New, settings
// parsed from KNEECAP_* variables as `kneecap serve` parses them) in front of
// real engine processes on the engines' own HTTP stacks (testengine: FastAPI
// on uvicorn as vLLM and SGLang serve, cpp-httplib as llama.cpp's server
// does), driven over 127.0.0.1 by real clients. It holds only tests.
//
// # Overview
//
//   - harness_test.go: a gateway on 127.0.0.1 in front of one engine URL,
//     what a client saw of one request (a complete stream, or which
//     OpenAI-shaped error), and settle, which waits for running = 0,
//     queued = 0 and no generation request active in the engine.
//   - keepalive_test.go: the connection-reuse cases of issue 12 (short
//     streams back to back; pauses around the engines' 5 s keep-alive):
//     no 5xx, no broken stream.
//   - engine_test.go: the engine fails (killed, hangs, error statuses,
//     bodies that are not JSON, broken SSE, an oversized event, restarts).
//   - clients_test.go: the clients fail (1,000 leave while queued or
//     mid-stream, one reads a byte a second, one never reads).
//   - metrics_test.go: the engine's metrics endpoint fails (missing,
//     hanging 30 s, 50 MiB of garbage, NaN values) while the gateway
//     reads it (issue 20): traffic unaffected, one log line each.
//   - tracing_test.go: OpenTelemetry tracing (issue 30) on the uvicorn
//     engine: the spans of a streamed, a non-streamed, a queued and a
//     refused request as an OTLP/HTTP receiver decodes them (otlptest), the
//     engine's traceparent the gateway span's; a collector down or hanging:
//     traffic unaffected, spans dropped and counted, a bounded stop.
//   - classes_test.go: priority classes and tenants (issue 16) on each
//     stack: a class's queue wait, hostile tenant headers, an unknown
//     class, a client that leaves the queue.
//
// # Ownership
//
// Each test owns its engine process (killed in t.Cleanup) and its gateway
// (stopped in t.Cleanup); TestMain checks with goleak that nothing outlives
// them.
package faults
