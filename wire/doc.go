// Package wire is the OpenAI-compatible streaming wire format that the gateway,
// the simulated engine and the benchmark client all speak, and the engines'
// own generation formats that the gateway also relays.
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
//     the usage report without disturbing any other field (usage_splice.go:
//     a body without stream_options keeps its bytes and gains the member).
//     [ParseRequest] reads integers as vLLM does (256.0 is 256; 256.5 is an
//     error); request_fast.go reads an OpenAI request on the same scanner as
//     Inspect and leaves to encoding/json what it cannot vouch for, held to
//     encoding/json by a differential fuzz test.
//   - shape.go, shape_scan.go, numbers.go: the other request and stream
//     formats ([Shape]): [ParseRequestAs] and [InspectAs] read them into the
//     same [Request] and [ChunkInfo]; numbers.go reads request fields the
//     way each engine does. InspectAs has a fast path on the same scanner as
//     Inspect, held to an encoding/json reader per shape like Inspect's.
//   - asstream.go, assemble.go, assemble_scan.go: a request that is not
//     streamed, rewritten to ask for a stream with usage ([AsStream]; the
//     fields that keep it whole are [WholeOnly]), and the [Assembler],
//     which merges that stream's chunks into the single JSON body the
//     engine would have answered (chat and text completions, OpenAI
//     shape).
//   - prompt.go, prefix.go: a request's prompt measured in one pass
//     ([MeasurePrompt]: characters of text and token IDs, for the gateway's
//     estimate) and fingerprinted ([PromptBlocks]: chained hashes of its
//     text in fixed-size blocks, for the request log), never copied.
//   - errors.go: OpenAI-shaped error bodies ([ErrorBody]) for JSON responses
//     and for SSE error events once a stream has started.
//
// # Shapes
//
// A generation route has a [Shape]: the format of its request body and of
// its stream. The gateway picks the shape from the route and hands it to
// ParseRequestAs and InspectAs; everything downstream (admission, TTFT and
// TPOT per output chunk, usage, finish, errors) sees the same Request and
// ChunkInfo whatever the shape.
//
//	route                                  shape           output limit                        stream ends with
//	/v1/chat/completions, /v1/completions  ShapeOpenAI     max_tokens, max_completion_tokens   data: [DONE]
//	llama.cpp /chat/completions            ShapeOpenAI     max_tokens, max_completion_tokens   data: [DONE]
//	vLLM /v1/responses                     ShapeResponses  max_output_tokens                   response.completed
//	llama.cpp /completion, /completions    ShapeLlamaCpp   n_predict                           "stop": true
//	llama.cpp /infill                      ShapeLlamaCpp   n_predict                           "stop": true
//	SGLang /generate                       ShapeSGLang     sampling_params.max_new_tokens      data: [DONE]
//
// llama.cpp's /completions (without /v1) is its native completion, not an
// alias of /v1/completions: the server routes /completion and /completions to
// the same native handler. Only the OpenAI shape has the usage-only chunk
// that stream_options.include_usage asks for (EnsureIncludeUsage is for it
// alone): the other shapes report usage unasked, in the last event
// (llama.cpp, Responses) or in every event (SGLang, recent llama.cpp). A
// Responses stream's events carry "event: <type>" lines, which
// [EventReader] keeps in Raw and leaves out of Data; InspectAs reads the type
// from the data's own "type" field.
//
// # Concurrency model
//
// The functions ([Inspect], [InspectAs], [ParseRequest], [ParseRequestAs],
// ...) hold no state and are safe for concurrent use. An [EventReader] is
// not: one goroutine reads a stream.
//
// # Ownership
//
// The package holds no state. An [EventReader] belongs to the goroutine that
// reads from it; the slices it returns are valid until its next call.
package wire
