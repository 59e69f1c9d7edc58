package reqlog

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/kneecap/kneecap/slo"
)

// Line is one request in the log. Durations are milliseconds (a float,
// microsecond precision); a zero or absent one was not observed (a
// refused request was never forwarded; a request not streamed has no
// TTFT of its own).
type Line struct {
	// Arrival is when the gateway received the request (RFC 3339, ns).
	Arrival time.Time `json:"arrival"`
	// Route is "chat" or "completions"; Model the request's model field.
	Route string `json:"route"`
	Model string `json:"model,omitempty"`
	// Class is the request's priority class; Tenant a hash of its tenant
	// (16 hex digits of SHA-256), never the tenant as sent.
	Class  string `json:"class,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// Streamed is true when the client asked for a stream.
	Streamed bool `json:"streamed"`
	// PromptTokens is the engine's count (its usage report) or, when the
	// engine never answered (refused, failed), the gateway's estimate;
	// PromptEstimated says which. 0 is unknown: a request refused from its
	// headers alone, before its body was read (a full queue, draining).
	PromptTokens    int  `json:"prompt_tokens"`
	PromptEstimated bool `json:"prompt_estimated,omitempty"`
	// CachedTokens is the prompt tokens the engine served from its prefix
	// cache, as its usage report (prompt_tokens_details.cached_tokens) or
	// llama.cpp's timings (cache_n) said; 0 when it did not say.
	CachedTokens int `json:"cached_tokens,omitempty"`
	// OutputTokens is the engine's count of output tokens (per choice);
	// MaxTokens the bound the request asked for (0: none).
	OutputTokens int `json:"output_tokens"`
	MaxTokens    int `json:"max_tokens,omitempty"`
	// TTFT is the client's (arrival to first output, queue included),
	// EngineTTFT the engine's (forwarding to first output); TPOT is
	// (E2E - TTFT) / (output tokens - 1), the same for both views (the
	// queue is behind it); QueueWait the time queued for a slot.
	TTFT       float64 `json:"ttft_ms,omitempty"`
	EngineTTFT float64 `json:"engine_ttft_ms,omitempty"`
	TPOT       float64 `json:"tpot_ms,omitempty"`
	E2E        float64 `json:"e2e_ms,omitempty"`
	QueueWait  float64 `json:"queue_wait_ms,omitempty"`
	// Outcome is "good", "late" (completed, missed a target: Missed names
	// which), "refused" (Reason says why), "failed" (the engine failed:
	// Reason), "cancelled" (the client left) or "invalid" (a 4xx).
	Outcome string `json:"outcome"`
	Missed  string `json:"missed,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Status is the HTTP status the client got.
	Status int `json:"status"`
	// Prefix is the prompt's prefix fingerprint: the chain hash of each
	// block of about 512 tokens (16 hex digits each), in order; two
	// requests share their first k hashes when their prompts share their
	// first k blocks.
	Prefix []string `json:"prefix,omitempty"`
}

// The values of Line.Outcome.
const (
	OutcomeGood      = "good"
	OutcomeLate      = "late"
	OutcomeRefused   = "refused"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
	OutcomeInvalid   = "invalid"
)

// FromRecord makes the line of a finished request.
func FromRecord(r *slo.Record) Line {
	l := Line{
		Arrival: r.Arrival.UTC(), Route: r.Route, Model: r.Model, Class: r.Class,
		Streamed: r.Streamed, PromptTokens: r.PromptTokens, CachedTokens: r.CachedPromptTokens,
		OutputTokens: r.OutputTokens, MaxTokens: r.MaxTokens,
		TTFT: ms(r.TTFT), EngineTTFT: ms(r.EngineTTFT), E2E: ms(r.E2E), QueueWait: ms(r.QueueWait),
		Reason: r.Reason, Status: r.Status,
	}
	if r.Tenant != "" {
		l.Tenant = HashTenant(r.Tenant)
	}
	if l.PromptTokens == 0 && r.PromptEstimate > 0 {
		l.PromptTokens, l.PromptEstimated = r.PromptEstimate, true
	}
	if tpot, ok := r.TPOT(); ok {
		l.TPOT = ms(tpot)
	}
	switch o := r.Outcome; {
	case o.Good():
		l.Outcome = OutcomeGood
	case o.Missed():
		l.Outcome, l.Missed = OutcomeLate, o.String()
	case o.Has(slo.Rejected):
		l.Outcome = OutcomeRefused
	case o.Has(slo.EngineError):
		l.Outcome = OutcomeFailed
	case o.Has(slo.ClientCancelled):
		l.Outcome = OutcomeCancelled
	default:
		l.Outcome = OutcomeInvalid
	}
	if len(r.Prefix) > 0 {
		l.Prefix = make([]string, len(r.Prefix))
		for i, h := range r.Prefix {
			l.Prefix[i] = FormatHash(h)
		}
	}
	return l
}

// FormatHash writes a prefix hash as the log does: 16 hex digits.
func FormatHash(h uint64) string {
	s := strconv.FormatUint(h, 16)
	for len(s) < 16 {
		s = "0" + s
	}
	return s
}

// HashTenant is the tenant as the log writes it: the first 16 hex digits
// of its SHA-256.
func HashTenant(t string) string {
	sum := sha256.Sum256([]byte(t))
	return hex.EncodeToString(sum[:8])
}

func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}
