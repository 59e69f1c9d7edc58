package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/slo"
)

const chatWhole = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

// TestReassembledMeasured: a reassembled request is measured like a
// stream (first chunk, gaps) for every flavour, judged by E2E alone, and
// its text is the stream's.
func TestReassembledMeasured(t *testing.T) {
	for _, f := range []proxytest.Flavor{proxytest.VLLM, proxytest.SGLang, proxytest.LlamaCpp} {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			t.Run(string(f)+path, func(t *testing.T) {
				eng := &proxytest.Engine{Flavor: f, Chunks: 5, TokensPerChunk: 2, Gap: time.Millisecond}
				s := newSetup(t, eng, Config{Targets: slo.Targets{TTFT: time.Nanosecond, TPOT: time.Nanosecond, E2E: time.Minute}})
				body := `{"model":"m","prompt":"hi"}`
				if strings.Contains(path, "chat") {
					body = chatWhole
				}
				resp := post(t, s.gateway.URL, path, body)
				got := readAll(t, resp)
				var v struct {
					Object  string `json:"object"`
					Choices []struct {
						Text         string `json:"text"`
						FinishReason string `json:"finish_reason"`
						Message      struct {
							Role, Content string
						} `json:"message"`
					} `json:"choices"`
					Usage struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal([]byte(got), &v); err != nil || resp.StatusCode != 200 || len(v.Choices) != 1 {
					t.Fatalf("status %d body %s (%v)", resp.StatusCode, got, err)
				}
				text, want := v.Choices[0].Text, strings.Repeat("tok ", 10)
				if strings.Contains(path, "chat") {
					text = v.Choices[0].Message.Content
					if v.Object != "chat.completion" || v.Choices[0].Message.Role != "assistant" {
						t.Fatalf("body %s", got)
					}
				}
				if text != want || v.Choices[0].FinishReason != "length" || v.Usage.CompletionTokens != 10 {
					t.Fatalf("body %s", got)
				}
				r := s.rec.last(t)
				if !r.Reassembled || r.OutputChunks != 5 || r.OutputTokens != 10 || r.Outcome != slo.Good || r.TTFT <= 0 || r.EngineTTFT <= 0 {
					t.Fatalf("record %+v", r)
				}
				// Judged by E2E alone: TTFT and TPOT (1 ns targets) were
				// missed as served, the client felt only the end.
				if _, ok := r.TPOT(); !ok || r.VerdictTargets() != (slo.Targets{E2E: time.Minute}) {
					t.Fatalf("record %+v", r)
				}
				s.rec.mu.Lock()
				firsts, chunks := len(s.rec.firsts), len(s.rec.chunks)
				s.rec.mu.Unlock()
				if firsts != 1 || chunks != 4 {
					t.Fatalf("observed %d first chunks and %d gaps, want 1 and 4", firsts, chunks)
				}
			})
		}
	}
}

// TestReassembledQueuesByE2E: a request that is not streamed is admitted
// by the targets its verdict uses: with an E2E target, it is not refused
// for its TTFT and may queue up to its E2E target.
func TestReassembledQueuesByE2E(t *testing.T) {
	eng := &proxytest.Engine{Chunks: 2, Gap: 300 * time.Millisecond}
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 10})
	s := newSetup(t, eng, Config{Limiter: lim, Targets: slo.Targets{TTFT: 50 * time.Millisecond, TPOT: time.Second, E2E: time.Minute}})
	done := make(chan string, 2)
	for range 2 {
		go func() {
			resp := post(t, s.gateway.URL, "/v1/chat/completions", chatWhole)
			done <- fmt.Sprint(resp.StatusCode, readAll(t, resp)[:10])
		}()
	}
	for range 2 {
		if got := <-done; !strings.HasPrefix(got, "200") {
			t.Fatalf("got %s, want both served (the second queued past its TTFT target)", got)
		}
	}
	for range 2 {
		if r := s.rec.last(t); r.Outcome != slo.Good {
			t.Fatalf("record %+v", r)
		}
	}
}

func TestReassembledFailures(t *testing.T) {
	t.Run("answer too large: 400, the engine request cancelled", func(t *testing.T) {
		cancelled := make(chan struct{})
		big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			chunk := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 64<<10) + `"}}]}` + "\n\n"
			for r.Context().Err() == nil {
				if _, err := io.WriteString(w, chunk); err != nil {
					break
				}
			}
			close(cancelled)
		})
		lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 10})
		s := newSetup(t, big, Config{Limiter: lim})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatWhole)
		body := readAll(t, resp)
		if resp.StatusCode != 400 || !strings.Contains(body, `"code":"response_too_large"`) || !strings.Contains(body, "stream it") {
			t.Fatalf("status %d body %.300s", resp.StatusCode, body)
		}
		if r := s.rec.last(t); r.Outcome != slo.InvalidRequest || r.Reason != reasonAnswerTooLarge {
			t.Fatalf("record %+v", r)
		}
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the engine request was not cancelled")
		}
		if st := lim.State(); st.Running != 0 {
			t.Fatalf("slot held: %+v", st)
		}
	})
	t.Run("engine error event: its body and status", func(t *testing.T) {
		ev := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
			_, _ = io.WriteString(w, "data: {\"error\":{\"message\":\"out of memory\",\"type\":\"InternalServerError\",\"param\":null,\"code\":503}}\n\n")
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		})
		s := newSetup(t, ev, Config{})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatWhole)
		if body := readAll(t, resp); resp.StatusCode != 503 || !strings.Contains(body, "out of memory") {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		if r := s.rec.last(t); r.Outcome != slo.EngineError || r.Reason != reasonErrorEvent || r.Status != 503 {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("no first token: 504 first_token_timeout", func(t *testing.T) {
		eng := &proxytest.Engine{FirstDelay: 2 * time.Second}
		s := newSetup(t, eng, Config{FirstTokenTimeout: 50 * time.Millisecond})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatWhole)
		if body := readAll(t, resp); resp.StatusCode != 504 || !strings.Contains(body, `"code":"first_token_timeout"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
	t.Run("answer not done within the response timeout: 504", func(t *testing.T) {
		eng := &proxytest.Engine{Chunks: 100, Gap: 20 * time.Millisecond}
		s := newSetup(t, eng, Config{FirstTokenTimeout: time.Minute, ResponseTimeout: 200 * time.Millisecond})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatWhole)
		if body := readAll(t, resp); resp.StatusCode != 504 || !strings.Contains(body, `"code":"response_timeout"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		if r := s.rec.last(t); r.Outcome != slo.EngineError || r.OutputChunks == 0 {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("stream cut short: 502 stream_broken", func(t *testing.T) {
		cut := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		})
		s := newSetup(t, cut, Config{})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatWhole)
		if body := readAll(t, resp); resp.StatusCode != 502 || !strings.Contains(body, `"code":"stream_broken"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
	t.Run("client leaves: the engine request ends, the slot is freed at once", func(t *testing.T) {
		eng := &proxytest.Engine{Chunks: 1000, Gap: 10 * time.Millisecond}
		lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 10})
		s := newSetup(t, eng, Config{Limiter: lim})
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.gateway.URL+"/v1/chat/completions", strings.NewReader(chatWhole))
		errc := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		for deadline := time.Now().Add(5 * time.Second); s.proxy.Running() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("not running")
			}
		}
		time.Sleep(50 * time.Millisecond)
		cancel()
		<-errc
		r := s.rec.last(t)
		if r.Outcome != slo.ClientCancelled || r.OutputChunks == 0 {
			t.Fatalf("record %+v", r)
		}
		if st := lim.State(); st.Running != 0 || s.proxy.Running() != 0 {
			t.Fatalf("slot held after the client left: %+v", st)
		}
	})
}
