package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is an Observer that keeps everything it is told.
type recorder struct {
	mu      sync.Mutex
	firsts  []FirstChunk
	chunks  []Chunk
	records []slo.Record
	done    chan struct{}
}

func newRecorder() *recorder { return &recorder{done: make(chan struct{}, 1000)} }

func (r *recorder) FirstChunk(c FirstChunk) {
	r.mu.Lock()
	r.firsts = append(r.firsts, c)
	r.mu.Unlock()
}
func (r *recorder) Chunk(c Chunk) { r.mu.Lock(); r.chunks = append(r.chunks, c); r.mu.Unlock() }
func (r *recorder) Done(rec slo.Record) {
	r.mu.Lock()
	r.records = append(r.records, rec)
	r.mu.Unlock()
	r.done <- struct{}{}
}

// last waits for the next record.
func (r *recorder) last(t *testing.T) slo.Record {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no record")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.records[len(r.records)-1]
}

type setup struct {
	engine  *httptest.Server
	gateway *httptest.Server
	rec     *recorder
	lim     *admission.Limiter
	proxy   *Proxy
}

func newSetup(t *testing.T, engine http.Handler, cfg Config) *setup {
	t.Helper()
	s := &setup{rec: newRecorder()}
	s.engine = httptest.NewServer(engine)
	t.Cleanup(s.engine.Close)
	u, _ := url.Parse(s.engine.URL)
	if cfg.Upstream == nil {
		cfg.Upstream = u
	}
	if cfg.Targets == (slo.Targets{}) {
		cfg.Targets = slo.Targets{TTFT: time.Hour, TPOT: time.Hour} // judged good however slow the machine
	}
	cfg.Observer = s.rec
	s.lim, _ = cfg.Limiter.(*admission.Limiter)
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.proxy = p
	s.gateway = httptest.NewServer(p)
	t.Cleanup(s.gateway.Close)
	return s
}

func post(t *testing.T, base, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const chatBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
const chatBodyUsage = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
const complBody = `{"model":"m","stream":true,"prompt":"hi"}`

func TestStreamFlavours(t *testing.T) {
	tests := []struct {
		name         string
		flavor       proxytest.Flavor
		path, body   string
		noUsage      bool
		wantUsageEvt bool // the client sees a usage-only chunk
		wantEvents   int  // data events the client sees, [DONE] included
		wantTokens   int
		estimated    bool
	}{
		// vLLM: role, 5 content, finish, [usage], [DONE].
		{"vllm chat, usage added and removed", proxytest.VLLM, "/v1/chat/completions", chatBody, false, false, 8, 15, false},
		{"vllm chat, client asked usage", proxytest.VLLM, "/v1/chat/completions", chatBodyUsage, false, true, 9, 15, false},
		{"vllm completions", proxytest.VLLM, "/v1/completions", complBody, false, false, 7, 15, false},
		// SGLang: 5 content (role in the first), finish, [usage], [DONE].
		{"sglang chat", proxytest.SGLang, "/v1/chat/completions", chatBody, false, false, 7, 15, false},
		// llama.cpp: 5 content (usage and finish in the last), [DONE]; nothing removed.
		{"llama.cpp chat", proxytest.LlamaCpp, "/v1/chat/completions", chatBody, false, false, 6, 15, false},
		{"no usage at all: estimated from chunks", proxytest.VLLM, "/v1/chat/completions", chatBody, true, false, 8, 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &proxytest.Engine{Flavor: tt.flavor, Chunks: 5, TokensPerChunk: 3, NoUsage: tt.noUsage, Gap: time.Millisecond}
			s := newSetup(t, eng, Config{})
			resp := post(t, s.gateway.URL, tt.path, tt.body)
			body := readAll(t, resp)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			evs := proxytest.Events(body)
			if len(evs) != tt.wantEvents || evs[len(evs)-1] != "[DONE]" {
				t.Fatalf("client got %d events, want %d: %q", len(evs), tt.wantEvents, evs)
			}
			sawUsageOnly := false
			for _, e := range evs[:len(evs)-1] {
				if info, _ := wire.Inspect([]byte(e)); info.UsageOnly {
					sawUsageOnly = true
				}
			}
			if sawUsageOnly != tt.wantUsageEvt {
				t.Fatalf("usage-only chunk seen = %v, want %v", sawUsageOnly, tt.wantUsageEvt)
			}
			// The engine was asked for usage.
			if fwd, _ := wire.ParseRequest(*eng.LastBody.Load()); !fwd.WantsUsage() {
				t.Fatal("include_usage not injected")
			}
			r := s.rec.last(t)
			if r.OutputTokens != tt.wantTokens || r.OutputChunks != 5 || r.Estimated != tt.estimated ||
				!r.Streamed || r.Status != 200 || r.Outcome != slo.Good || r.TTFT <= 0 || r.EngineTTFT <= 0 ||
				r.E2E < r.TTFT || r.Model != "m" {
				t.Fatalf("record %+v", r)
			}
			s.rec.mu.Lock()
			defer s.rec.mu.Unlock()
			if len(s.rec.firsts) != 1 || len(s.rec.chunks) != 4 || s.rec.firsts[0].Running != 1 {
				t.Fatalf("observed %d first chunks, %d later chunks (running %v)", len(s.rec.firsts), len(s.rec.chunks), s.rec.firsts)
			}
		})
	}
}

// TestBytesUnchanged checks that, apart from the usage-only chunk the
// gateway asked for, the client gets exactly the engine's bytes.
func TestBytesUnchanged(t *testing.T) {
	for _, f := range []proxytest.Flavor{proxytest.VLLM, proxytest.SGLang, proxytest.LlamaCpp} {
		eng := &proxytest.Engine{Flavor: f, Chunks: 3, TokensPerChunk: 2}
		s := newSetup(t, eng, Config{})
		viaGateway := readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBodyUsage))
		direct := readAll(t, post(t, s.engine.URL, "/v1/chat/completions", chatBodyUsage))
		if viaGateway != direct {
			t.Fatalf("%s: bytes differ\ngateway: %q\nengine:  %q", f, viaGateway, direct)
		}
	}
}

// TestNonStreamed: a request that is not streamed is sent to the engine
// as a stream with usage, measured, and answered whole; one with a field
// that keeps it whole is relayed as it was, unmeasured.
func TestNonStreamed(t *testing.T) {
	eng := &proxytest.Engine{Chunks: 4, TokensPerChunk: 5}
	s := newSetup(t, eng, Config{Targets: slo.Targets{TTFT: time.Minute, TPOT: time.Second}})
	resp := post(t, s.gateway.URL, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	body := readAll(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(body, `"completion_tokens":20`) || !strings.Contains(body, `"object":"chat.completion"`) ||
		resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "" {
		t.Fatalf("status %d headers %v body %s", resp.StatusCode, resp.Header, body)
	}
	if fwd := string(*eng.LastBody.Load()); fwd != `{"messages":[],"model":"m","stream":true,"stream_options":{"include_usage":true}}` {
		t.Fatalf("forwarded %s", fwd)
	}
	r := s.rec.last(t)
	if r.Streamed || !r.Reassembled || r.OutputTokens != 20 || r.OutputChunks != 4 || r.TTFT <= 0 || r.Outcome != slo.Good || r.E2E < r.TTFT {
		t.Fatalf("record %+v", r)
	}

	whole := `{"model":"m","messages":[],"prompt_logprobs":1}`
	resp = post(t, s.gateway.URL, "/v1/chat/completions", whole)
	body = readAll(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(body, `"completion_tokens":20`) {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if fwd := string(*eng.LastBody.Load()); fwd != whole {
		t.Fatalf("relayed whole, but forwarded %s", fwd)
	}
	r = s.rec.last(t)
	if r.Streamed || r.Reassembled || r.OutputTokens != 20 || r.TTFT != 0 || r.Outcome != slo.Good || r.E2E <= 0 {
		t.Fatalf("record %+v", r)
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name, body string
		hdr        []string
		status     int
		code       string
	}{
		{"malformed json", `{"model":`, nil, 400, "invalid_json"},
		{"not an object", `[1,2]`, nil, 400, "invalid_json"},
		{"too large", `{"model":"m","prompt":"` + strings.Repeat("x", 2000) + `"}`, nil, 413, "body_too_large"},
		{"bad slo header", chatBody, []string{"x-slo-ttft-ms", "soon"}, 400, "invalid_slo_header"},
	}
	eng := &proxytest.Engine{}
	s := newSetup(t, eng, Config{MaxBodyBytes: 1000})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, s.gateway.URL, "/v1/chat/completions", tt.body, tt.hdr...)
			var eb wire.ErrorBody
			if err := json.Unmarshal([]byte(readAll(t, resp)), &eb); err != nil || resp.StatusCode != tt.status ||
				eb.Error.Code == nil || *eb.Error.Code != tt.code || eb.Error.Type != wire.TypeInvalidRequest {
				t.Fatalf("status %d, body %+v, err %v", resp.StatusCode, eb, err)
			}
			if r := s.rec.last(t); r.Outcome != slo.InvalidRequest || r.Reason != tt.code {
				t.Fatalf("record %+v", r)
			}
		})
	}
	if n := eng.Requests.Load(); n != 0 {
		t.Fatalf("engine contacted %d times for bad input", n)
	}
}

func TestSLOHeadersJudged(t *testing.T) {
	eng := &proxytest.Engine{Chunks: 3, Gap: 30 * time.Millisecond}
	s := newSetup(t, eng, Config{})
	readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBody, "x-slo-tpot-ms", "1"))
	if r := s.rec.last(t); r.Outcome != slo.MissedTPOT || r.Targets.TPOT != time.Millisecond {
		t.Fatalf("record %+v, want missed_tpot with a 1 ms target", r)
	}
}

// TestClientCancel checks that a client that leaves mid-stream cancels the
// engine request at once and gives its slot back.
func TestClientCancel(t *testing.T) {
	engineSawCancel := make(chan struct{})
	eng := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
		close(engineSawCancel)
	})
	lim := admission.NewLimiter(admission.Config{Limit: 1})
	s := newSetup(t, eng, Config{Limiter: lim})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.gateway.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-engineSawCancel:
	case <-time.After(10 * time.Second):
		t.Fatal("engine request not cancelled")
	}
	if r := s.rec.last(t); r.Outcome != slo.ClientCancelled || lim.Running() != 0 {
		t.Fatalf("record %+v, running %d", r, lim.Running())
	}
}

// TestClientLeavesAfterOutput checks that a client that hangs up right after
// the finish chunk, before the usage chunk and [DONE], is judged on what it
// got, not counted as cancelled.
func TestClientLeavesAfterOutput(t *testing.T) {
	eng := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"+
			"data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n")
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done() // the usage chunk and [DONE] never come
	})
	s := newSetup(t, eng, Config{})
	req, _ := http.NewRequest(http.MethodPost, s.gateway.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 4 { // two events, each a data line and a blank line
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close()
	if r := s.rec.last(t); r.Outcome != slo.Good || r.OutputChunks != 2 || !r.Estimated {
		t.Fatalf("record %+v, want good with 2 estimated tokens", r)
	}
}

func TestPassthrough(t *testing.T) {
	s := newSetup(t, &proxytest.Engine{}, Config{})
	resp, err := http.Get(s.gateway.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, `"id":"fake"`) {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	select {
	case <-s.rec.done:
		t.Fatal("passthrough request was recorded")
	default:
	}
}

// TestNoBrokenStreams is the regression test for golang/go#40747: an engine
// that answers (headers and a first event) before it reads the request body
// must not break any stream. 200 streamed generation requests, 16 at a
// time, each with a 200 kB body that spans many TCP writes; then 100 on a
// passthrough path. (A plain httputil.ReverseProxy broke 2 of 208 in this
// setup.)
func TestNoBrokenStreams(t *testing.T) {
	eng := &proxytest.Engine{Flavor: proxytest.VLLM, HeadersFirst: true, Chunks: 8, TokensPerChunk: 2}
	// The passthrough path /v1/stream (opened by the operator) streams the
	// same way.
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/stream" {
			r.URL.Path = "/v1/chat/completions"
		}
		eng.ServeHTTP(w, r)
	})
	s := newSetup(t, mux, Config{Passthrough: []string{"/v1/stream"}})
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 40_000) + `"}]}`)
	for _, tt := range []struct {
		path  string
		total int
	}{{"/v1/chat/completions", 200}, {"/v1/stream", 100}} {
		var mu sync.Mutex
		broken := 0
		var wg sync.WaitGroup
		jobs := make(chan int)
		for range 16 {
			wg.Go(func() {
				for range jobs {
					resp, err := http.Post(s.gateway.URL+tt.path, "application/json", bytes.NewReader(body))
					ok := err == nil
					if ok {
						b, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						evs := proxytest.Events(string(b))
						ok = err == nil && resp.StatusCode == 200 && len(evs) == 11 && evs[len(evs)-1] == "[DONE]"
						if !ok {
							t.Logf("%s: status %d, %d events, err %v: %.300s", tt.path, resp.StatusCode, len(evs), err, b)
						}
					} else {
						t.Logf("%s: %v", tt.path, err)
					}
					if !ok {
						mu.Lock()
						broken++
						mu.Unlock()
					}
				}
			})
		}
		for i := range tt.total {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		if broken != 0 {
			t.Fatalf("%s: %d of %d streams broken", tt.path, broken, tt.total)
		}
	}
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	if len(s.rec.records) != 200 {
		t.Fatalf("%d records, want 200 (passthrough is not recorded)", len(s.rec.records))
	}
	for _, r := range s.rec.records {
		if !r.Outcome.Completed() { // good or missed: the machine may be slow
			t.Fatalf("record %+v", r)
		}
	}
}
