package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/wire"
)

// fuzzEngine answers every request from memory: an SSE stream for a
// request that asked for one, a JSON completion otherwise.
type fuzzEngine struct{}

func (fuzzEngine) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	out := `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	if bytes.Contains(body, []byte(`"stream":true`)) {
		h.Set("Content-Type", "text/event-stream")
		out = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n" +
			"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}\n\n" +
			"data: [DONE]\n\n"
	}
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(out)), Request: r}, nil
}

// FuzzEdge drives hostile methods, paths, headers and bodies through the
// whole traffic handler with a real limiter, and checks: no panic; the
// answer is a relayed one or a well-formed OpenAI error; afterwards no slot
// is held, nothing is queued and the body budget is whole. The seeds are
// below; found inputs are kept in testdata/fuzz/FuzzEdge.
func FuzzEdge(f *testing.F) {
	for _, s := range []struct {
		method, target, hname, hvalue string
		body                          string
		declared                      bool
	}{
		{"POST", "/v1/chat/completions", "Content-Type", "application/json", `{"model":"m","stream":true,"messages":[]}`, true},
		{"POST", "/v1/chat/%63ompletions", "X-Slo-Ttft-Ms", "0", `{"stream":true,"max_tokens":256.0}`, true},
		{"POST", "//v1//completions/", "X-Slo-Tpot-Ms", "1", `{"prompt":"a","n":2}`, false},
		{"POST", "/generate", "X-Slo-E2e-Ms", "-5", `{"text":"a","sampling_params":{"max_new_tokens":4},"stream":true}`, true},
		{"POST", "/completion", "Content-Length", "99999999", `{"prompt":"a","n_predict":2.5}`, true},
		{"POST", "/v1/responses", "X-Forwarded-For", "1.2.3.4", `{"input":"a","stream":true}`, true},
		{"GET", "/v1/models?x=%zz", "Connection", "close, X-Slo-Ttft-Ms", ``, false},
		{"POST", "/sleep", "", "", `{}`, true},
		{"DELETE", "/v1/embeddings", "Transfer-Encoding", "chunked", `[]`, false},
		{"POST", "/v1/../../../etc/passwd", "Host", "evil", `null`, true},
		{"PATCH", "/v1/chat/completions\x00", "X-Slo-Ttft-Ms", "99999999999999999999", `{"stream":"yes"}`, true},
	} {
		f.Add(s.method, s.target, s.hname, s.hvalue, []byte(s.body), s.declared)
	}
	up, _ := url.Parse("http://engine.invalid")
	f.Fuzz(func(t *testing.T, method, target, hname, hvalue string, body []byte, declared bool) {
		lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 1})
		p, err := New(Config{Upstream: up, Transport: fuzzEngine{}, Limiter: lim,
			Targets:      slo.Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond},
			MaxBodyBytes: 1 << 16, MaxBodyBytesTotal: 1 << 17, FirstTokenTimeout: time.Second,
			StreamIdleTimeout: time.Second, ResponseTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			u = &url.URL{Path: target}
		}
		r := (&http.Request{Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Host: "kneecap", RemoteAddr: "127.0.0.1:1234",
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: -1}).WithContext(context.Background())
		if declared {
			r.ContentLength = int64(len(body))
		}
		if hname != "" && !strings.ContainsAny(hname, "\r\n:") {
			r.Header.Set(hname, hvalue)
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)

		resp := w.Result()
		out, _ := io.ReadAll(resp.Body)
		switch {
		case resp.StatusCode >= 400:
			var e wire.ErrorBody
			if err := json.Unmarshal(out, &e); err != nil || e.Error.Type == "" || e.Error.Message == "" {
				t.Fatalf("status %d with a body that is not an OpenAI error: %q", resp.StatusCode, out)
			}
		case resp.StatusCode == 200 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
			for ev := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n\n") {
				if !strings.HasPrefix(ev, "data: ") {
					t.Fatalf("a malformed event %q in %q", ev, out)
				}
			}
		case resp.StatusCode == 200:
			if !json.Valid(out) {
				t.Fatalf("200 with a body that is not JSON: %q", out)
			}
		default:
			t.Fatalf("status %d: %q", resp.StatusCode, out)
		}
		if st := lim.State(); st.Running != 0 || st.Queued != 0 {
			t.Fatalf("left behind: running %d, queued %d", st.Running, st.Queued)
		}
		if !p.bodies.sem.TryAcquire(1 << 17) {
			t.Fatal("the body budget was not given back whole")
		}
	})
}
