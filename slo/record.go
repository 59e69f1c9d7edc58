package slo

import (
	"strings"
	"time"
)

// Outcome is the judgement of one request. It is a small bit set: zero is
// good; the Missed* bits may hold together; the failure classes stand alone.
// Its String is the value of the metric label "outcome".
type Outcome uint8

// Outcomes.
const (
	Good Outcome = 0
	// MissedTTFT: the first output came later than the TTFT target.
	MissedTTFT Outcome = 1 << iota
	// MissedTPOT: the time per output token exceeded the TPOT target.
	MissedTPOT
	// MissedE2E: the last output came later than the E2E target (or, for a
	// non-streamed request without an E2E target, later than
	// TTFT + TPOT x (output_tokens - 1)).
	MissedE2E
	// Rejected: admission refused the request (429, or 503 while draining).
	Rejected
	// EngineError: the engine failed (unreachable, 5xx, timeout, broken or
	// error-carrying stream).
	EngineError
	// ClientCancelled: the client went away before the response ended.
	ClientCancelled
	// InvalidRequest: the request was refused as malformed (400, 413), by
	// the gateway or by the engine (4xx). Not judged, not counted in
	// attainment.
	InvalidRequest

	missedMask = MissedTTFT | MissedTPOT | MissedE2E
)

// Good reports whether the request met every target it had.
func (o Outcome) Good() bool { return o == Good }

// Missed reports whether the request completed but missed some target.
func (o Outcome) Missed() bool { return o&missedMask != 0 && o&^missedMask == 0 }

// Completed reports whether the engine answered in full (good or missed).
func (o Outcome) Completed() bool { return o&^missedMask == 0 }

// Has reports whether every bit of f is set in o.
func (o Outcome) Has(f Outcome) bool { return o&f == f }

var outcomeNames = [...]struct {
	bit  Outcome
	name string
}{
	{MissedTTFT, "missed_ttft"}, {MissedTPOT, "missed_tpot"}, {MissedE2E, "missed_e2e"},
	{Rejected, "rejected"}, {EngineError, "engine_error"},
	{ClientCancelled, "client_cancelled"}, {InvalidRequest, "invalid_request"},
}

// String returns "good", one name such as "missed_ttft" or "rejected", or
// several missed names joined by "+" ("missed_ttft+missed_tpot"), in the
// order ttft, tpot, e2e. The set of values is small and fixed, so it is a
// safe metric label.
func (o Outcome) String() string {
	if o == Good {
		return "good"
	}
	var b strings.Builder
	for _, n := range outcomeNames {
		if o&n.bit != 0 {
			if b.Len() > 0 {
				b.WriteByte('+')
			}
			b.WriteString(n.name)
		}
	}
	return b.String()
}

// MarshalText encodes the outcome as its String, for JSON.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Record is what the gateway measured about one generation request. Zero
// durations mean "not observed" (a non-streamed request has no TTFT; a
// rejected one was never forwarded).
type Record struct {
	// Route is the generation route: "chat" or "completions".
	Route string `json:"route"`
	// Model is the request's model field.
	Model string `json:"model"`
	// Streamed is true for a request the client asked to stream (SSE).
	Streamed bool `json:"streamed"`
	// Reassembled is true for a request the client did not stream that
	// the gateway asked the engine to stream, measured like a stream and
	// answered with the single JSON body the engine would have sent: its
	// TTFT, gaps and TPOT are as the engine served them, though the client
	// felt only the end (see Judge).
	Reassembled bool `json:"reassembled,omitempty"`
	// Status is the HTTP status the client got (0 when the client left
	// before any was sent).
	Status int `json:"status"`
	// Reason is a short cause for a failure or rejection (for example
	// "queue_full", "upstream_unreachable", "first_token_timeout"), empty
	// otherwise. A bounded set, safe as a label.
	Reason string `json:"reason,omitempty"`

	// Class is the request's priority class and Tenant its tenant (a
	// bounded label, an API key only as its hash); both empty without
	// classes.
	Class  string `json:"class,omitempty"`
	Tenant string `json:"tenant,omitempty"`

	// Arrival is when the gateway received the request.
	Arrival time.Time `json:"arrival"`
	// Targets are the bounds after header overrides.
	Targets Targets `json:"targets"`
	// QueueWait is the time spent waiting for a slot.
	QueueWait time.Duration `json:"queue_wait"`
	// TTFT runs from arrival to the first output chunk (the client's view;
	// for a reassembled request, when the client would have had it had it
	// streamed).
	TTFT time.Duration `json:"ttft"`
	// EngineTTFT runs from forwarding to the first output chunk.
	EngineTTFT time.Duration `json:"engine_ttft"`
	// E2E runs from arrival to the last output chunk (streamed) or to the
	// end of the response body (not streamed: relayed whole, or
	// reassembled and written).
	E2E time.Duration `json:"e2e"`
	// MaxITL is the longest gap between successive output chunks. Each gap
	// is reported live to observers; the record keeps only the maximum so
	// that it needs no per-chunk storage.
	MaxITL time.Duration `json:"max_itl"`
	// MeanRunning is the mean number of requests running on the engine
	// when the stream's output chunks arrived (0 with no output): the
	// concurrency the request's time per token was spent at.
	MeanRunning float64 `json:"mean_running"`

	// PromptTokens and OutputTokens come from the engine's usage report.
	PromptTokens int `json:"prompt_tokens"`
	// CachedPromptTokens is the part of PromptTokens the engine served
	// from its prefix cache, as its usage report (prompt_tokens_details.
	// cached_tokens) or llama.cpp's timings (cache_n) said; 0 when it
	// did not say.
	CachedPromptTokens int `json:"cached_prompt_tokens,omitempty"`
	// PromptEstimate is the prompt tokens the gateway estimated from the
	// body before the engine answered (what the context check used).
	PromptEstimate int `json:"prompt_estimate,omitempty"`
	// PromptCharged is the part of PromptEstimate admission charged as
	// prefill: the estimate less the share of recent prompt tokens the
	// engine's prefix cache served (all of it when the gateway does not
	// count cached tokens).
	PromptCharged int `json:"prompt_charged,omitempty"`
	// PrefillAhead is the prompt tokens (estimated) of the requests that
	// still waited for their first token when this one was granted its
	// slot, and PrefillSpan the time from the grant of the oldest of them
	// to this request's forwarding: the prefill work the engine had to do
	// before or with this one's (see admission.Ticket.PrefillAhead).
	PrefillAhead int           `json:"prefill_ahead,omitempty"`
	PrefillSpan  time.Duration `json:"prefill_span,omitempty"`
	// PrefillWith is the prompt tokens (estimated) of the requests granted
	// after this one whose first token came before or with its own: the
	// engine prefilled them with it, in the batch it formed of the prompts
	// waiting together (see admission.Ticket.PrefillWith).
	PrefillWith int `json:"prefill_with,omitempty"`
	// PrefillStep is the engine's decode step the gateway predicted when
	// the request was granted (0 before it knew): a prefill waits for the
	// step under way and then decodes the running requests in its own.
	PrefillStep time.Duration `json:"prefill_step,omitempty"`
	// GrantRunning is the requests holding a slot when this one was
	// granted its own, this one included (0: unknown).
	GrantRunning int `json:"grant_running,omitempty"`
	OutputTokens int `json:"output_tokens"`
	// OutputChunks counts chunks that carried output.
	OutputChunks int `json:"output_chunks"`
	// Estimated is true when the engine sent no usage report and
	// OutputTokens is the number of output chunks instead.
	Estimated bool `json:"estimated,omitempty"`
	// Choices is the request's n when it asked for several choices (0
	// otherwise). OutputTokens is then per choice (the usage report's
	// completion tokens divided by n), so that TPOT is a choice's; such a
	// request's chunks interleave its choices, so it is judged but not fed
	// to the controller's model.
	Choices int `json:"choices,omitempty"`

	// MaxTokens is the output bound the request asked for (max_tokens or
	// max_completion_tokens, times n), 0 when it gave none.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Prefix is the prompt's prefix fingerprint (wire.PromptBlocks: chain
	// hashes of its leading blocks of text, never the text), set only when
	// the proxy is asked for it (proxy.Config.PrefixBlockTokens); nil
	// otherwise.
	Prefix []uint64 `json:"prefix,omitempty"`

	// Outcome is the judgement (see Judge).
	Outcome Outcome `json:"outcome"`
}

// TPOT returns (E2E - TTFT) / (output_tokens - 1), vLLM's time per output
// token, which excludes the first token. ok is false when it is not
// defined: no stream measured (relayed whole), no first output, or fewer
// than two output tokens. A reassembled request has one: its E2E runs to
// the written answer, a little after its last token.
func (r *Record) TPOT() (tpot time.Duration, ok bool) {
	if !r.FirstObserved() || r.OutputTokens < 2 || r.E2E < r.TTFT {
		return 0, false
	}
	return (r.E2E - r.TTFT) / time.Duration(r.OutputTokens-1), true
}

// FirstObserved reports whether the request's first output chunk was
// seen: it was streamed from the engine (to the client, or reassembled)
// and produced output, so TTFT and engine TTFT are measured.
func (r *Record) FirstObserved() bool {
	return (r.Streamed || r.Reassembled) && r.OutputChunks > 0
}

// VerdictTargets are the targets Judge holds the request to, as the client
// feels it: every target of a streamed request; the E2E target alone of
// one that is not streamed (its client sees only the end), or, without
// an E2E target, its TTFT and TPOT targets, whose bound on E2E at its
// output length, TTFT + TPOT x (output_tokens - 1), Judge applies. The
// controller groups requests into classes by these, so that one judged on
// E2E alone is predicted and measured apart from the streams.
func (r *Record) VerdictTargets() Targets { return r.Targets.Verdict(r.Streamed) }
