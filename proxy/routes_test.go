package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy/proxytest"
)

// pathLog is an engine that records every path it is sent, and streams a
// slow chat completion on the generation route.
type pathLog struct {
	eng   *proxytest.Engine
	mu    sync.Mutex
	paths []string
}

func (l *pathLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.paths = append(l.paths, r.Method+" "+r.URL.Path)
	l.mu.Unlock()
	switch r.URL.Path {
	case "/v1/chat/completions", "/v1/models", "/health":
		l.eng.ServeHTTP(w, r)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}
}

func (l *pathLog) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.paths...)
}

// rawRequest sends a request line as written (no client-side cleaning).
func rawRequest(t *testing.T, base, method, target, body string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", method, target, len(body), body)
	b, _ := io.ReadAll(c)
	var status int
	fmt.Sscanf(string(b), "HTTP/1.1 %d", &status)
	return status, string(b)
}

// holdTheSlot starts a stream that takes the limiter's one slot, waits
// until it has, and returns a func that waits for the stream's end.
func holdTheSlot(t *testing.T, s *setup, lim *admission.Limiter) (wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		readAll(t, post(t, s.gateway.URL, "/v1/chat/completions", chatBody))
	}()
	for lim.Running() == 0 {
		time.Sleep(time.Millisecond)
	}
	return func() { <-done }
}

// TestNoWayPastTheCap: with cap 1, queue 0 and one long stream running,
// no variant of a generation path gets a 200 from the engine: each is
// admitted (and so refused with 429 here) or 404; admin routes are 404;
// read-only routes pass; an operator's passthrough path passes.
func TestNoWayPastTheCap(t *testing.T) {
	engine := &pathLog{eng: &proxytest.Engine{Chunks: 2, FirstDelay: 2 * time.Second}}
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 0})
	s := newSetup(t, engine, Config{Limiter: lim, Passthrough: []string{"/v1/load_lora_adapter", "/debug/*"}})
	defer holdTheSlot(t, s, lim)()
	admitted := []string{
		"/v1/chat/completions", "/v1/chat/%63ompletions", "/v1/chat/completions/", "/chat/completions",
		"//v1//chat/completions", "/v1/./chat/completions", "/v1/x/../chat/completions", "/v1/chat/completions?x=1",
		"/v1/completions", "/v1/completions/", "/completions", "/v1/responses", "/completion", "/infill",
		"/generate", "/generate/", "/v1/embeddings", "/v1/rerank", "/score",
		"/v1/%2e%2e/v1/chat/completions", // decodes to /v1/../v1/chat/completions
	}
	for _, p := range admitted {
		status, resp := rawRequest(t, s.gateway.URL, "POST", p, chatBody)
		if status != http.StatusTooManyRequests {
			t.Errorf("POST %s: status %d, want 429 (admitted, and the cap is full):\n%s", p, status, resp)
		}
	}
	closed := []string{
		"/sleep", "/wake_up", "/reset_prefix_cache", "/start_profile", "/stop_profile", "/collective_rpc",
		"/flush_cache", "/update_weights_from_disk", "/slots/0?action=erase", "/props", "/lora-adapters",
		"/v1/chat", "/v1/chat/completions/x", "/SLEEP", "/sleep/../flush_cache",
	}
	for _, p := range closed {
		status, resp := rawRequest(t, s.gateway.URL, "POST", p, "{}")
		// 405 for a known read-only path (GET /props) on POST; 404 for the rest.
		if (status != http.StatusNotFound || !strings.Contains(resp, `"code":"route_not_found"`)) &&
			(status != http.StatusMethodNotAllowed || !strings.Contains(resp, `"code":"method_not_allowed"`)) {
			t.Errorf("POST %s: status %d, want an OpenAI-shaped 404 or 405:\n%s", p, status, resp)
		}
	}
	for _, c := range []struct{ method, path string }{{"GET", "/v1/chat/completions"}, {"POST", "/v1/models"}, {"DELETE", "/health"}} {
		if status, resp := rawRequest(t, s.gateway.URL, c.method, c.path, ""); status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: status %d, want 405:\n%s", c.method, c.path, status, resp)
		}
	}
	passed := []struct{ method, path string }{
		{"GET", "/v1/models"}, {"GET", "/v1/models/fake"}, {"GET", "/health"}, {"GET", "/props"}, {"POST", "/tokenize"},
		{"POST", "/v1/load_lora_adapter"}, {"POST", "/debug/x"}, {"GET", "/debug"},
	}
	for _, c := range passed {
		if status, resp := rawRequest(t, s.gateway.URL, c.method, c.path, "{}"); status != http.StatusOK {
			t.Errorf("%s %s: status %d, want 200 from the engine:\n%s", c.method, c.path, status, resp)
		}
	}
	var gen []string
	for _, p := range engine.seen() {
		if !strings.HasPrefix(p, "GET ") && p != "POST /tokenize" && p != "POST /v1/load_lora_adapter" && p != "POST /debug/x" {
			gen = append(gen, p)
		}
	}
	if len(gen) != 1 {
		t.Errorf("the engine was sent %q; want only the one stream that holds the slot", gen)
	}
}

func TestCanonicalPath(t *testing.T) {
	for in, want := range map[string]string{
		"": "/", "/": "/", "/v1/chat/completions/": "/v1/chat/completions", "//v1//x": "/v1/x",
		"/a/./b/../c": "/a/c", "/../../etc": "/etc", "v1/models": "/v1/models",
	} {
		if got := CanonicalPath(in); got != want {
			t.Errorf("CanonicalPath(%q) = %q, want %q", in, got, want)
		}
	}
	for p, ok := range map[string]bool{"/v1/load_lora_adapter": true, "/debug/*": true, "/debug*": true, "/": false, "x": false, "/a/../b": false, "/a/": false, "*": false} {
		if ValidPassthroughPath(p) != ok {
			t.Errorf("ValidPassthroughPath(%q) = %v", p, !ok)
		}
	}
}

// headersOnly sends a request's headers promising a body of n bytes and
// returns the connection and a reader of the response.
func headersOnly(t *testing.T, base, path string, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, n)
	return c
}

func statusOf(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	// One Read may return the head without the body: read the whole
	// response (the gateway's answers all have a length).
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("answer %d cut short: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, fmt.Sprintf("%s\n%v\n%s", resp.Status, resp.Header, body)
}

// TestRefusedBeforeTheBody: with the slot taken and no queue, a request is
// refused from its headers alone, before it sends a byte of its body.
func TestRefusedBeforeTheBody(t *testing.T) {
	eng := &proxytest.Engine{Chunks: 2, FirstDelay: time.Second}
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 0})
	s := newSetup(t, eng, Config{Limiter: lim})
	defer holdTheSlot(t, s, lim)()
	c := headersOnly(t, s.gateway.URL, "/v1/chat/completions", 1<<20)
	if status, resp := statusOf(t, c); status != http.StatusTooManyRequests || !strings.Contains(resp, "queue_full") {
		t.Fatalf("status %d, want 429 queue_full before the body:\n%s", status, resp)
	}
}

// TestBodyBudget: bodies held across requests are bounded; a request whose
// declared body does not fit is refused before any of it is read, and the
// budget comes back when the holder ends.
func TestBodyBudget(t *testing.T) {
	s := newSetup(t, &proxytest.Engine{}, Config{MaxBodyBytes: 1 << 20, MaxBodyBytesTotal: 1 << 20})
	holder := headersOnly(t, s.gateway.URL, "/v1/chat/completions", 1<<20)
	_, _ = holder.Write([]byte("{")) // the rest never comes: its 1 MiB stays taken
	time.Sleep(100 * time.Millisecond)
	c := headersOnly(t, s.gateway.URL, "/v1/chat/completions", 512<<10)
	if status, resp := statusOf(t, c); status != http.StatusTooManyRequests || !strings.Contains(resp, "body_budget") {
		t.Fatalf("status %d, want 429 body_budget:\n%s", status, resp)
	}
	holder.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
		body := readAll(t, resp)
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the budget did not come back: %d %s", resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLenientAndPerChoice: a float max_tokens relays as vLLM would take it;
// a request with n = 2 is judged per choice and kept out of the live
// measurements (its chunks interleave the choices).
func TestLenientAndPerChoice(t *testing.T) {
	s := newSetup(t, &proxytest.Engine{Chunks: 4}, Config{})
	resp := post(t, s.gateway.URL, "/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":256.0,"messages":[]}`)
	if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("max_tokens 256.0: status %d body %s", resp.StatusCode, body)
	}
	if r := s.rec.last(t); r.OutputTokens != 4 || r.Choices != 0 {
		t.Fatalf("record %+v", r)
	}
	s.rec.mu.Lock()
	chunksBefore := len(s.rec.chunks)
	s.rec.mu.Unlock()
	resp = post(t, s.gateway.URL, "/v1/chat/completions", `{"model":"m","stream":true,"n":2,"messages":[]}`)
	if body := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("n 2: status %d body %s", resp.StatusCode, body)
	}
	r := s.rec.last(t)
	if r.Choices != 2 || r.OutputTokens != 2 {
		t.Fatalf("n 2: record %+v, want 2 choices of 2 output tokens each", r)
	}
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	if len(s.rec.chunks) != chunksBefore {
		t.Fatalf("n 2: %d chunk observations, want none", len(s.rec.chunks)-chunksBefore)
	}
}

// TestAdmittedUploadHoldsNoSlot: a route admitted without a token stream
// (embeddings) reads its body before it takes a slot, so a slow upload
// holds none; once the body is in, it is admitted and relayed.
func TestAdmittedUploadHoldsNoSlot(t *testing.T) {
	engine := &pathLog{eng: &proxytest.Engine{}}
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 0})
	s := newSetup(t, engine, Config{Limiter: lim})
	body := `{"model":"m","input":"a slow upload"}`
	c := headersOnly(t, s.gateway.URL, "/v1/embeddings", len(body))
	_, _ = c.Write([]byte(body[:5]))
	time.Sleep(200 * time.Millisecond) // the gateway is reading the body now
	if st := lim.State(); st.Running != 0 {
		t.Fatalf("an upload in progress holds %d slots", st.Running)
	}
	resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
	if got := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("a stream beside the upload: %d %s", resp.StatusCode, got)
	}
	_, _ = c.Write([]byte(body[5:]))
	if status, resp := statusOf(t, c); status != http.StatusOK || !strings.Contains(resp, `{"ok":true}`) {
		t.Fatalf("the upload, once whole: status %d\n%s", status, resp)
	}
	// The client has the answer before the handler returns and releases
	// the slot: wait for it, boundedly.
	for deadline := time.Now().Add(5 * time.Second); lim.Running() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots held 5 s after both ended", lim.Running())
		}
	}
}
