// Package wire is the OpenAI-compatible streaming wire format that the gateway,
// the simulated engine and the benchmark client all speak.
//
// # Overview
//
//   - sse.go: Server-Sent Events framing. [EventReader] splits a byte stream
//     into events and keeps each event's exact bytes, so a relay can forward
//     the engine's bytes unchanged; [WriteData] frames one data event.
//   - chunk.go: the shapes of streamed chunks (chat and text completions) and
//     [Inspect], which reads just what a measurement needs from one chunk:
//     does it carry output, does it carry a usage report, is it usage-only.
//   - inspect.go, jsonscan.go: Inspect's fast path, a single-pass scanner
//     that reads those fields in place without allocating. It answers only
//     where its answer is certainly encoding/json's; anything else
//     (malformed JSON, type errors, pathological keys) goes to the
//     encoding/json decoder it replaced, so results and errors are the same
//     on every input (a differential fuzz test holds it to that).
//   - request.go: the fields of a generation request that a gateway or client
//     acts on ([Request]) and [EnsureIncludeUsage], which asks the engine for
//     the usage report without disturbing any other field.
//   - errors.go: OpenAI-shaped error bodies ([ErrorBody]) for JSON responses
//     and for SSE error events once a stream has started.
//
// # Concurrency model
//
// The functions ([Inspect], [ParseRequest], ...) hold no state and are safe
// for concurrent use. An [EventReader] is not: one goroutine reads a stream.
//
// # Ownership
//
// The package holds no state. An [EventReader] belongs to the goroutine that
// reads from it; the slices it returns are valid until its next call.
package wire
