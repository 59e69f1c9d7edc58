package proxytest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kneecap/kneecap/wire"
)

// Flavor is the engine whose chunk shapes are imitated.
type Flavor string

// Flavors.
const (
	// VLLM sends a role-only chunk first, content chunks, a finish chunk, and
	// the usage report in its own chunk with empty choices when asked.
	VLLM Flavor = "vllm"
	// SGLang sends content from the first chunk on (role in it), a finish
	// chunk, and the usage report in its own chunk when asked.
	SGLang Flavor = "sglang"
	// LlamaCpp sends no role chunk and puts the usage report in its last
	// chunk, together with the finish_reason, whether asked or not.
	LlamaCpp Flavor = "llamacpp"
)

// Engine is an http.Handler imitating an inference engine. The zero value
// is a vLLM engine that streams 4 chunks of 1 token at once.
type Engine struct {
	Flavor Flavor
	// Chunks is the number of output chunks (default 4); TokensPerChunk the
	// tokens each carries (default 1).
	Chunks, TokensPerChunk int
	// FirstDelay is the time before the first output chunk (after the role
	// chunk, if any); Gap the time between output chunks.
	FirstDelay, Gap time.Duration
	// HeadersFirst writes and flushes the response headers and the role
	// chunk before reading the request body, as some engines do; this is the
	// pattern behind golang/go#40747.
	HeadersFirst bool
	// NoUsage makes the engine ignore stream_options.include_usage and never
	// report usage.
	NoUsage bool
	// Requests counts generation requests received.
	Requests atomic.Int64
	// LastBody holds the last generation request body received.
	LastBody atomic.Pointer[[]byte]
}

// ServeHTTP implements http.Handler.
func (e *Engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/health":
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"fake","object":"model"}]}`)
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions"):
		e.generate(w, r, r.URL.Path == "/v1/chat/completions")
	default:
		http.NotFound(w, r)
	}
}

func (e *Engine) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	e.Requests.Add(1)
	flush := func() { _ = http.NewResponseController(w).Flush() }
	if e.HeadersFirst {
		// Python engines read the body while answering; Go's server needs
		// full duplex for that on HTTP/1.1.
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		flush()
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	e.LastBody.Store(&body)
	req, err := wire.ParseRequest(body)
	if err != nil {
		if !e.HeadersFirst {
			wire.WriteError(w, http.StatusBadRequest, wire.TypeInvalidRequest, "", err.Error())
		}
		return
	}
	chunks, per := max(e.Chunks, 1), max(e.TokensPerChunk, 1)
	if e.Chunks == 0 {
		chunks = 4
	}
	usage := wire.Usage{PromptTokens: 7, CompletionTokens: chunks * per, TotalTokens: 7 + chunks*per}
	if !req.Stream && !e.HeadersFirst {
		time.Sleep(e.FirstDelay + time.Duration(chunks-1)*e.Gap)
		w.Header().Set("Content-Type", "application/json")
		text := strings.TrimSpace(strings.Repeat("tok ", chunks*per))
		obj := map[string]any{"id": "x", "object": "chat.completion", "model": req.Model, "usage": usage,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "length"}}}
		if !chat {
			obj["object"] = "text_completion"
			obj["choices"] = []any{map[string]any{"index": 0, "text": text, "finish_reason": "length"}}
		}
		_ = json.NewEncoder(w).Encode(obj)
		return
	}
	if !e.HeadersFirst {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
	}
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if err := wire.WriteData(w, b); err != nil {
			return false
		}
		flush()
		return r.Context().Err() == nil
	}
	text := strings.Repeat("tok ", per)
	stop := "length"
	chunk := func(content *string, role string, finish *string, u *wire.Usage) any {
		if chat {
			return wire.ChatChunk{ID: "x", Object: "chat.completion.chunk", Model: req.Model, Usage: u,
				Choices: []wire.ChatChoice{{Delta: wire.ChatDelta{Role: role, Content: content}, FinishReason: finish}}}
		}
		c := wire.CompletionChunk{ID: "x", Object: "text_completion", Model: req.Model, Usage: u,
			Choices: []wire.CompletionChoice{{FinishReason: finish}}}
		if content != nil {
			c.Choices[0].Text = *content
		}
		return c
	}
	if chat && (e.Flavor == VLLM || e.Flavor == "") {
		empty := ""
		if !send(chunk(&empty, "assistant", nil, nil)) {
			return
		}
	}
	time.Sleep(e.FirstDelay)
	for i := range chunks {
		if i > 0 {
			time.Sleep(e.Gap)
		}
		role := ""
		if e.Flavor == SGLang && i == 0 {
			role = "assistant"
		}
		var u *wire.Usage
		var fin *string
		if e.Flavor == LlamaCpp && i == chunks-1 && !e.NoUsage {
			u, fin = &usage, &stop // llama.cpp: usage and finish ride on the last chunk
		}
		if !send(chunk(&text, role, fin, u)) {
			return
		}
	}
	if e.Flavor != LlamaCpp {
		if !send(chunk(nil, "", &stop, nil)) {
			return
		}
		if req.WantsUsage() && !e.NoUsage {
			if chat {
				send(wire.ChatChunk{ID: "x", Object: "chat.completion.chunk", Model: req.Model, Choices: []wire.ChatChoice{}, Usage: &usage})
			} else {
				send(wire.CompletionChunk{ID: "x", Object: "text_completion", Model: req.Model, Choices: []wire.CompletionChoice{}, Usage: &usage})
			}
		}
	}
	_ = wire.WriteData(w, wire.DoneData)
	flush()
}
