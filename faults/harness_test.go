package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/testengine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gw is a gateway on 127.0.0.1 in front of one engine.
type gw struct {
	g        *gateway.Gateway
	reg      *prometheus.Registry
	traffic  string // http://127.0.0.1:PORT
	admin    string
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

// startGateway runs a gateway in front of eng with the settings env (as
// KEY=VALUE, parsed and validated as `kneecap serve` does) and stops it in
// t.Cleanup.
func startGateway(t *testing.T, eng *testengine.Engine, env ...string) *gw {
	t.Helper()
	return startGatewayWith(t, eng, nil, env...)
}

// startGatewayWith is startGateway with more options of gateway.New (a
// logger, say).
func startGatewayWith(t *testing.T, eng *testengine.Engine, opts []gateway.Option, env ...string) *gw {
	t.Helper()
	return startGatewayURL(t, opts, append([]string{"KNEECAP_UPSTREAM=" + eng.URL().String()}, env...))
}

// startGatewayURL runs a gateway with the settings env (KNEECAP_UPSTREAM
// among them) and the options opts, and stops it in t.Cleanup.
func startGatewayURL(t *testing.T, opts []gateway.Option, env []string) *gw {
	t.Helper()
	cfg, err := gateway.ConfigFromEnv(env)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &gw{reg: prometheus.NewRegistry(), traffic: "http://" + tl.Addr().String(), admin: "http://" + al.Addr().String(), done: make(chan error, 1)}
	if h.g, err = gateway.New(cfg, append([]gateway.Option{gateway.WithListeners(tl, al), gateway.WithRegistry(h.reg)}, opts...)...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.g.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	return h
}

func (h *gw) stop(t *testing.T) {
	h.stopOnce.Do(func() {
		h.cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30 s")
		}
	})
}

// counter reads one series of a counter (or a counter func) of the gateway.
func (h *gw) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
		return 0
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// settle waits (up to 15 s) until the gateway holds no slot and queues
// nothing, and the engine (when it runs; nil for one that is not a test
// engine) serves no generation request: a fault must leave nothing behind
// on either side.
func settle(t *testing.T, h *gw, eng *testengine.Engine) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := h.g.Limiter().State()
		active := 0
		if eng != nil && !eng.Exited() {
			_, active = eng.Stats(t)
		}
		if st.Running == 0 && st.Queued == 0 && active == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after 15 s: running %d, queued %d, active in the engine %d", st.Running, st.Queued, active)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heapAfterGC returns the Go heap in use after a collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// seen is what a client saw of one generation request.
type seen struct {
	status   int
	complete bool   // a stream that ended with [DONE], or a 2xx JSON answer
	errCode  string // the error's code: of the body, or of the SSE error event
	errType  string
	events   int // data events before the end or the error
	body     string
}

func (s seen) String() string {
	return fmt.Sprintf("status %d complete %v error %q/%q after %d events; body %.300q", s.status, s.complete, s.errType, s.errCode, s.events, s.body)
}

// answered reports whether the client got what it must get whatever
// failed: a complete answer, or an explicit OpenAI-shaped error (an error
// body with a status, or an SSE error event once the headers were out).
func (s seen) answered() bool { return s.complete || s.errType != "" }

const (
	chatStream = `{"model":"test","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"say something"}]}`
	// chatWhole is not streamed: the gateway reassembles it from a stream.
	chatWhole = `{"model":"test","stream":false,"max_tokens":%d,"messages":[{"role":"user","content":"say something"}]}`
	// chatWholeOnly is not streamed and asks for prompt logprobs, which
	// keeps it whole (wire.WholeOnly): the gateway relays it whole.
	chatWholeOnly = `{"model":"test","stream":false,"max_tokens":%d,"prompt_logprobs":0,"messages":[{"role":"user","content":"say something"}]}`
)

// request sends one chat completion (streamed or not) with the engine
// headers hdr (name, value pairs) and reads the whole answer.
func request(ctx context.Context, c *http.Client, base string, stream bool, tokens int, hdr ...string) (seen, error) {
	body := fmt.Sprintf(chatWhole, tokens)
	if stream {
		body = fmt.Sprintf(chatStream, tokens)
	}
	return send(ctx, c, base, body, hdr...)
}

// send sends one chat completion body with the engine headers hdr and
// reads the whole answer.
func send(ctx context.Context, c *http.Client, base, body string, hdr ...string) (seen, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return seen{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return seen{}, err
	}
	defer resp.Body.Close()
	return read(resp)
}

// read reads a response as a client would.
func read(resp *http.Response) (seen, error) {
	s := seen{status: resp.StatusCode}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, err := io.ReadAll(resp.Body)
		s.body = string(b)
		if err != nil {
			return s, err
		}
		var e struct {
			Error *struct {
				Type string `json:"type"`
				Code any    `json:"code"` // a string here, a number in vLLM's errors
			} `json:"error"`
		}
		switch {
		case json.Unmarshal(b, &e) != nil:
			// not JSON at all: neither complete nor an error a client can read
		case e.Error != nil && resp.StatusCode >= 400:
			s.errType = e.Error.Type
			if e.Error.Code != nil {
				s.errCode = fmt.Sprint(e.Error.Code)
			}
		case resp.StatusCode/100 == 2:
			s.complete = true
		}
		return s, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	var text strings.Builder
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if text.Len() < 4096 {
			text.WriteString(line[:min(len(line), 512)] + "\n")
		}
		if data == "[DONE]" {
			s.complete = true
			continue
		}
		var e struct {
			Error *struct {
				Type string `json:"type"`
				Code any    `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(data), &e) == nil && e.Error != nil {
			s.errType, s.errCode = e.Error.Type, fmt.Sprint(e.Error.Code)
			continue
		}
		s.events++
	}
	s.body = text.String()
	return s, sc.Err()
}
