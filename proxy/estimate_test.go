package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/wire"
)

// The estimator learns a tokenizer's rate and a template's fixed tokens
// from usage reports, per route and model, and falls back to the route's
// fit for a model it has not seen.
func TestEstimatorCalibrates(t *testing.T) {
	e := newEstimator()
	m := func(chars int) wire.PromptSize { return wire.PromptSize{Chars: chars} }
	if got := e.estimate("chat", "a", m(400)); got != 100 {
		t.Fatalf("before any report: %d, want 100 (4 characters a token)", got)
	}
	for i := range 40 {
		chars := 100 + i*37
		e.learn("chat", "a", m(chars), 12+chars/6) // 6 characters a token, 12 of template
	}
	if got := e.estimate("chat", "a", m(6000)); got < 1005 || got > 1015 {
		t.Fatalf("model a, 6000 chars: %d, want about 1012", got)
	}
	if got := e.estimate("chat", "b", m(6000)); got < 1005 || got > 1015 {
		t.Fatalf("model b (unseen) uses the route's fit: %d, want about 1012", got)
	}
	if got := e.estimate("completions", "a", m(400)); got != 100 {
		t.Fatalf("another route keeps the default: %d", got)
	}
	// Token IDs count as they are; a whole-body measure teaches nothing.
	if got := e.estimate("chat", "a", wire.PromptSize{Tokens: 50}); got < 60 || got > 64 {
		t.Fatalf("50 token IDs: %d, want 50 + the template", got)
	}
	before := e.estimate("chat", "a", m(6000))
	e.learn("chat", "a", wire.PromptSize{Chars: 10, Whole: true}, 1e6)
	if e.estimate("chat", "a", m(6000)) != before {
		t.Fatal("a whole-body measure moved the fit")
	}
}

// The models a client names are bounded: beyond maxEstimateModels a new
// model learns only into its route's fit.
func TestEstimatorBoundsModels(t *testing.T) {
	e := newEstimator()
	for i := range 3 * maxEstimateModels {
		e.learn("chat", fmt.Sprintf("model-%d", i), wire.PromptSize{Chars: 600}, 100)
	}
	if len(e.fits) > maxEstimateModels {
		t.Fatalf("%d fits kept, want at most %d", len(e.fits), maxEstimateModels)
	}
}

// A prompt estimated beyond the engine's context gets the engine's 400
// before it queues, and the limiter sees every other request's estimate.
func TestPromptTooLong(t *testing.T) {
	lim := admission.NewLimiter(admission.Config{Limit: 4, MaxQueue: 4})
	s := newSetup(t, &proxytest.Engine{Flavor: proxytest.VLLM}, Config{Limiter: lim, MaxModelLen: 1000})
	long := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 2000) + `"}]}`
	resp := post(t, s.gateway.URL, "/v1/chat/completions", long)
	body := readAll(t, resp)
	var e struct {
		Error struct{ Type, Code, Message string }
	}
	if resp.StatusCode != http.StatusBadRequest || json.Unmarshal([]byte(body), &e) != nil ||
		e.Error.Code != reasonPromptTooLong || !strings.Contains(e.Error.Message, "maximum context length is 1000") {
		t.Fatalf("%d %s: want a 400 context_length_exceeded", resp.StatusCode, body)
	}
	if rec := s.rec.last(t); rec.PromptEstimate < 2000 {
		t.Fatalf("estimate %d, want about 2500 (10000 characters)", rec.PromptEstimate)
	}
	// A short one passes, with its estimate.
	resp = post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
	readAll(t, resp)
	if rec := s.rec.last(t); resp.StatusCode != 200 || rec.PromptEstimate <= 0 || rec.PromptEstimate > 10 {
		t.Fatalf("short prompt: %d, estimate %d", resp.StatusCode, rec.PromptEstimate)
	}
}
