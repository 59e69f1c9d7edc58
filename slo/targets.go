package slo

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Targets are the latency bounds a request is judged against. A zero field
// means that bound is not set and is never missed.
type Targets struct {
	// TTFT bounds the time from arrival to the first output chunk, as the
	// client felt it (gateway queue included).
	TTFT time.Duration `json:"ttft"`
	// TPOT bounds the time per output token after the first:
	// (E2E - TTFT) / (output_tokens - 1).
	TPOT time.Duration `json:"tpot"`
	// E2E bounds the time from arrival to the last output.
	E2E time.Duration `json:"e2e"`
}

// Verdict returns the targets a request with targets t is judged by: all
// of them when streamed; when not streamed, the E2E target alone if set,
// else TTFT and TPOT, which bound its E2E at TTFT + TPOT x
// (output_tokens - 1) (see Judge and Record.VerdictTargets). A request
// refused or queued before its body was read has not said whether it
// streams: the gateway uses t as given until then.
func (t Targets) Verdict(streamed bool) Targets {
	switch {
	case streamed:
		return t
	case t.E2E > 0:
		return Targets{E2E: t.E2E}
	}
	return Targets{TTFT: t.TTFT, TPOT: t.TPOT}
}

// Header names of per-request overrides, in whole milliseconds.
const (
	HeaderTTFT = "X-Slo-Ttft-Ms"
	HeaderTPOT = "X-Slo-Tpot-Ms"
	HeaderE2E  = "X-Slo-E2e-Ms"
)

// maxHeaderMillis bounds an override (one day), so that a typo cannot
// overflow a Duration.
const maxHeaderMillis = 24 * 60 * 60 * 1000

// WithHeaders returns t with the overrides found in h applied. A request
// may tighten or loosen each bound; "0" removes it. A value that is not a
// whole number of milliseconds between 0 and one day is an error naming the
// header; t is returned unchanged with it.
func (t Targets) WithHeaders(h http.Header) (Targets, error) {
	out := t
	for _, o := range [...]struct {
		name string
		dst  *time.Duration
	}{{HeaderTTFT, &out.TTFT}, {HeaderTPOT, &out.TPOT}, {HeaderE2E, &out.E2E}} {
		v := h.Get(o.name)
		if v == "" {
			continue
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 || ms > maxHeaderMillis {
			return t, fmt.Errorf("header %s: %q is not a whole number of milliseconds in [0, %d]", o.name, v, maxHeaderMillis)
		}
		*o.dst = time.Duration(ms) * time.Millisecond
	}
	return out, nil
}
