package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/wire"
)

func TestUpstreamFailures(t *testing.T) {
	t.Run("unreachable 502", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		u, _ := url.Parse(dead.URL)
		dead.Close()
		s := newSetup(t, &proxytest.Engine{}, Config{Upstream: u})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
		if body := readAll(t, resp); resp.StatusCode != 502 || !strings.Contains(body, `"type":"server_error"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		if r := s.rec.last(t); r.Outcome != slo.EngineError || r.Reason != reasonUnreachable {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("no headers before first-token timeout 504", func(t *testing.T) {
		hang := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // so that the server notices the gateway hanging up
			<-r.Context().Done()
		})
		s := newSetup(t, hang, Config{FirstTokenTimeout: 50 * time.Millisecond})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
		if body := readAll(t, resp); resp.StatusCode != 504 || !strings.Contains(body, `"type":"timeout_error"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		if r := s.rec.last(t); r.Outcome != slo.EngineError || r.Reason != reasonFirstTokenTimeout {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("headers sent, then no first token: SSE error event", func(t *testing.T) {
		eng := &proxytest.Engine{Flavor: proxytest.VLLM, FirstDelay: 2 * time.Second}
		s := newSetup(t, eng, Config{FirstTokenTimeout: 50 * time.Millisecond})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
		evs := proxytest.Events(readAll(t, resp))
		if resp.StatusCode != 200 || len(evs) != 2 || !strings.Contains(evs[1], `"type":"timeout_error"`) {
			t.Fatalf("status %d events %q", resp.StatusCode, evs)
		}
		if r := s.rec.last(t); r.Outcome != slo.EngineError || r.Reason != reasonFirstTokenTimeout {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("stream broken mid-way: SSE error event", func(t *testing.T) {
		broken := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler) // cut the connection
		})
		s := newSetup(t, broken, Config{})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
		evs := proxytest.Events(readAll(t, resp))
		if len(evs) != 2 || !strings.Contains(evs[1], `"code":"stream_broken"`) {
			t.Fatalf("events %q", evs)
		}
		if r := s.rec.last(t); r.Outcome != slo.EngineError || r.OutputChunks != 1 {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("engine 500 relayed", func(t *testing.T) {
		e500 := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			wire.WriteError(w, 500, wire.TypeServer, "", "engine exploded")
		})
		s := newSetup(t, e500, Config{})
		resp := post(t, s.gateway.URL, "/v1/chat/completions", chatBody)
		if body := readAll(t, resp); resp.StatusCode != 500 || !strings.Contains(body, "engine exploded") {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
		if r := s.rec.last(t); r.Outcome != slo.EngineError || r.Status != 500 {
			t.Fatalf("record %+v", r)
		}
	})
}

// TestClientWriteDeadlineDoesNotCarryOver: the write deadline of one
// response must not fail the next response on the same keep-alive
// connection (net/http clears it when a response is finished).
func TestClientWriteDeadlineDoesNotCarryOver(t *testing.T) {
	s := newSetup(t, &proxytest.Engine{}, Config{ClientWriteTimeout: 50 * time.Millisecond})
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer c.CloseIdleConnections()
	for i, path := range []string{"/v1/chat/completions", "/v1/models", "/v1/chat/completions"} {
		if i > 0 {
			time.Sleep(150 * time.Millisecond) // well past the first response's deadline
		}
		method, body := http.MethodPost, chatBody
		if path == "/v1/models" {
			method, body = http.MethodGet, ""
		}
		reused := false
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
		req, _ := http.NewRequestWithContext(ctx, method, s.gateway.URL+path, strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d (%s): %v", i, path, err)
		}
		got := readAll(t, resp)
		if resp.StatusCode != 200 || (path != "/v1/models" && !strings.Contains(got, "[DONE]")) {
			t.Fatalf("request %d (%s): status %d body %q", i, path, resp.StatusCode, got)
		}
		if i > 0 && !reused {
			t.Fatalf("request %d went out on a new connection: the test tests nothing", i)
		}
	}
	if got := s.proxy.Retries(); got != 0 {
		t.Errorf("%d retries against an engine that closes nothing", got)
	}
}

// TestFailureTable checks the table: every row is reached by its own
// sentinel, also wrapped; admission's reasons are its own labels; answer
// writes a row's status and, for refusals, Retry-After and the reason.
func TestFailureTable(t *testing.T) {
	seen := map[error]bool{}
	for i := range failures {
		f := &failures[i]
		if seen[f.err] {
			t.Errorf("%v: two rows", f.err)
		}
		seen[f.err] = true
		if got := failureOf(fmt.Errorf("context: %w", f.err)); got != f {
			t.Errorf("%v: answered by the row of %v", f.err, got.err)
		}
	}
	for _, cause := range []error{admission.ErrQueueFull, admission.ErrQueueTimeout, admission.ErrDeadline, admission.ErrDraining, admission.ErrShed, errors.New("other")} {
		re := &admission.RejectError{Err: cause, RetryAfter: 1500 * time.Millisecond}
		w := httptest.NewRecorder()
		f, status := answer(w, re)
		if f.reason != re.Reason() || f.outcome != slo.Rejected || status != w.Code {
			t.Errorf("%v: row %+v status %d", cause, f, status)
		}
		if w.Header().Get("Retry-After") != "2" || w.Header().Get(HeaderReason) != re.Reason() {
			t.Errorf("%v: headers %v", cause, w.Header())
		}
		want := 429
		if cause == admission.ErrDraining {
			want = 503
		}
		if w.Code != want {
			t.Errorf("%v: status %d, want %d", cause, w.Code, want)
		}
	}
	// A read error that is an oversized event is that, not a broken stream.
	if f := failureOf(&failed{kind: errStreamBroken, cause: fmt.Errorf("read: %w", wire.ErrEventTooLarge)}); f.reason != reasonEventTooLarge {
		t.Errorf("oversized event answered as %s", f.reason)
	}
	// The engine's own status and Retry-After, its text as the message.
	w := httptest.NewRecorder()
	answer(w, &failed{kind: errEngineRefused, status: 422, msg: "the engine answered 422: bad", retryAfter: "7"})
	if w.Code != 422 || w.Header().Get("Retry-After") != "7" || w.Header().Get(HeaderReason) != "" ||
		!strings.Contains(w.Body.String(), `"code":"engine_status"`) || !strings.Contains(w.Body.String(), "422: bad") {
		t.Errorf("engine status: %d %v %s", w.Code, w.Header(), w.Body)
	}
	// A client that left is told nothing.
	w = httptest.NewRecorder()
	if _, status := answer(w, clientLeft(errors.New("reset"))); status != 0 || w.Body.Len() != 0 {
		t.Errorf("client gone: %d %s", status, w.Body)
	}
}
