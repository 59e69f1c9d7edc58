package enginemetrics

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeEngine is a RoundTripper that answers as the mode set last: a body,
// a status, a hang until the request's context ends, or an endless body.
type fakeEngine struct {
	mu      sync.Mutex
	mode    string // "ok", "404", "500", "hang", "endless", "refused"
	body    string
	served  atomic.Int64 // bytes handed out by endless bodies
	started atomic.Int64 // requests received
	active  atomic.Int64 // requests whose response is not closed
}

func (f *fakeEngine) set(mode, body string) {
	f.mu.Lock()
	f.mode, f.body = mode, body
	f.mu.Unlock()
}

func (f *fakeEngine) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	mode, body := f.mode, f.body
	f.mu.Unlock()
	f.started.Add(1)
	resp := func(code int, r io.Reader) *http.Response {
		f.active.Add(1)
		return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{},
			Body: &trackedBody{Reader: r, ctx: req.Context(), f: f}, Request: req}
	}
	switch mode {
	case "404":
		return resp(http.StatusNotFound, strings.NewReader("not found")), nil
	case "500":
		return resp(http.StatusInternalServerError, strings.NewReader("oops")), nil
	case "hang":
		<-req.Context().Done()
		return nil, req.Context().Err()
	case "refused":
		return nil, io.ErrUnexpectedEOF
	case "endless":
		return resp(http.StatusOK, endless{f}), nil
	}
	return resp(http.StatusOK, strings.NewReader(body)), nil
}

// trackedBody ends with the request's context, as a transport's body does.
type trackedBody struct {
	io.Reader
	ctx    context.Context
	f      *fakeEngine
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	return b.Reader.Read(p)
}

func (b *trackedBody) Close() error {
	if !b.closed {
		b.closed = true
		b.f.active.Add(-1)
	}
	return nil
}

// endless is a body of garbage that never ends.
type endless struct{ f *fakeEngine }

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = "\x07garbage \xff\n"[i%11]
	}
	e.f.served.Add(int64(len(p)))
	return len(p), nil
}

// logBuf collects log lines; safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")[:strings.Count(l.b.String(), "\n")]
}

// harness runs a Scraper in front of a fakeEngine; call it in a bubble.
type harness struct {
	s    *Scraper
	eng  *fakeEngine
	logs *logBuf
	reg  *prometheus.Registry
	stop func()
}

func start(t *testing.T, cfg Config, mode, body string) *harness {
	t.Helper()
	h := &harness{eng: &fakeEngine{}, logs: &logBuf{}, reg: prometheus.NewRegistry()}
	h.eng.set(mode, body)
	cfg.URL, _ = url.Parse("http://engine:8000/metrics")
	cfg.Transport = h.eng
	cfg.Logger = slog.New(slog.NewTextHandler(h.logs, nil))
	cfg.Registerer = h.reg
	var err error
	if h.s, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.s.Run(ctx) }()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(h.stop)
	return h
}

const goodBody = "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1\nvllm:num_requests_running 3\n"

func TestScrapeOK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{}, "ok", goodBody)
		t0 := time.Now()
		time.Sleep(time.Millisecond)
		r, ok := h.s.Latest()
		if !ok || r.Engine != EngineVLLM || r.KVUsage != 0.5 || r.KVCapacity != 1600 || r.KVTokens != 800 || r.Running != 3 {
			t.Fatalf("Latest = %+v, %v", r, ok)
		}
		if !r.At.Equal(t0) {
			t.Errorf("At %v, the scrape was at %v", r.At, t0)
		}
		time.Sleep(10 * time.Second)
		if n := h.eng.started.Load(); n != 11 {
			t.Errorf("%d scrapes in 10 s at 1 s (one at once), want 11", n)
		}
		st := h.s.Status()
		if st.State != StateOK || st.Scrapes != 11 || st.Failures != 0 || !st.Fresh || st.Reading == nil || st.Reading.Engine != "vllm" {
			t.Errorf("status %+v", st)
		}
		want := `
# HELP kneecap_engine_kv_capacity_tokens The engine's KV cache capacity in tokens (vLLM: num_gpu_blocks x block_size, SGLang: max_total_num_tokens); absent when unknown or stale.
# TYPE kneecap_engine_kv_capacity_tokens gauge
kneecap_engine_kv_capacity_tokens 1600
# HELP kneecap_engine_kv_tokens KV cache tokens in use as the engine counts them (llama.cpp: finished sequences' cells kept in its unified cache included); absent when unknown or stale.
# TYPE kneecap_engine_kv_tokens gauge
kneecap_engine_kv_tokens 800
# HELP kneecap_engine_kv_usage_ratio Share of the engine's KV cache in use, 0 to 1, as the engine publishes it (vllm:kv_cache_usage_perc, sglang:token_usage, llamacpp:kv_cache_usage_ratio); absent when unknown or stale.
# TYPE kneecap_engine_kv_usage_ratio gauge
kneecap_engine_kv_usage_ratio 0.5
# HELP kneecap_engine_scrape_up 1 if the last scrape of the engine's own metrics endpoint gave a reading, 0 otherwise (or none yet).
# TYPE kneecap_engine_scrape_up gauge
kneecap_engine_scrape_up 1
`
		if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want), MetricKVCapacity, MetricKVTokens, MetricKVUsage, MetricUp); err != nil {
			t.Error(err)
		}
		if lines := h.logs.lines(); len(lines) != 1 || !strings.Contains(lines[0], "reading the engine's KV cache") || !strings.Contains(lines[0], "engine=vllm") {
			t.Errorf("log lines %q", lines)
		}
	})
}

// Each failure gives its state, a count by reason, one log line however
// long it lasts, and a reading that turns stale after three intervals;
// the recovery gives one more line.
func TestScrapeFailures(t *testing.T) {
	for _, tc := range []struct {
		mode, body string
		state      State
	}{
		{"404", "", StateMissing},
		{"500", "", StateStatus},
		{"hang", "", StateSlow},
		{"refused", "", StateUnreachable},
		{"endless", "", StateTooLarge},
		{"ok", strings.Repeat("\x00 garbage\n", 100), StateGarbled},
		{"ok", "vllm:kv_cache_usage_perc NaN\nvllm:num_requests_running NaN\n", StateInvalid},
	} {
		t.Run(string(tc.state), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const maxBytes = 256 << 10
				h := start(t, Config{MaxBytes: maxBytes}, "ok", goodBody)
				time.Sleep(time.Millisecond)
				if _, ok := h.s.Latest(); !ok {
					t.Fatal("no reading before the failure")
				}
				h.eng.set(tc.mode, tc.body)
				time.Sleep(1799 * time.Millisecond) // the scrape at 1 s, cut at 1.75 s if it hangs
				if st := h.s.Status(); st.State != tc.state {
					t.Fatalf("state %s (%s), want %s", st.State, st.LastError, tc.state)
				}
				if _, ok := h.s.Latest(); !ok {
					t.Error("the reading of 1.8 s ago is not stale yet")
				}
				time.Sleep(1200 * time.Millisecond)
				if r, ok := h.s.Latest(); ok || r.Engine != EngineVLLM {
					t.Errorf("reading 3 s old: ok %v, %+v (want the stale reading, not ok)", ok, r)
				}
				time.Sleep(57900 * time.Millisecond) // a minute of failures: t = 60.9 s
				st := h.s.Status()
				if st.Scrapes != 61 || st.Failures != 60 || st.Fresh {
					t.Errorf("status %+v", st)
				}
				if got := testutil.ToFloat64(h.s.m.errors.WithLabelValues(string(tc.state))); got != 60 {
					t.Errorf("errors{reason=%s} = %v, want 60", tc.state, got)
				}
				if got := testutil.ToFloat64(h.s.m.up); got != 0 {
					t.Errorf("up = %v", got)
				}
				if n := testutil.CollectAndCount(readingCollector{h.s}); n != 0 {
					t.Errorf("%d kv series while stale", n)
				}
				if tc.mode == "endless" {
					// Each scrape reads at most MaxBytes (+1 and the line
					// buffer), not the endless body.
					if per := h.eng.served.Load() / 60; per > maxBytes+1 {
						t.Errorf("%d bytes read per scrape of an endless body", per)
					}
				}
				if n := h.eng.active.Load(); n != 0 {
					t.Errorf("%d response bodies not closed", n)
				}
				h.eng.set("ok", goodBody)
				time.Sleep(time.Second)
				if _, ok := h.s.Latest(); !ok || h.s.Status().State != StateOK {
					t.Errorf("not recovered: %+v", h.s.Status())
				}
				lines := h.logs.lines()
				if len(lines) != 3 || !strings.Contains(lines[1], "level=WARN") || !strings.Contains(lines[1], "state="+string(tc.state)) ||
					!strings.Contains(lines[2], "state=ok before="+string(tc.state)) {
					t.Errorf("log lines (want ok, %s, ok):\n%s", tc.state, strings.Join(lines, "\n"))
				}
			})
		})
	}
}

// A hanging endpoint is cut at the timeout, and scrapes never overlap.
func TestHangIsCutAtTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{Interval: 2 * time.Second, Timeout: 500 * time.Millisecond}, "hang", "")
		time.Sleep(499 * time.Millisecond)
		if st := h.s.Status(); st.Scrapes != 0 {
			t.Fatalf("a scrape ended before its timeout: %+v", st)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if st := h.s.Status(); st.Scrapes != 1 || st.State != StateSlow {
			t.Fatalf("the hang was not cut at 500ms: %+v", st)
		}
		time.Sleep(10 * time.Second)
		if n := h.eng.started.Load(); n != 6 {
			t.Errorf("%d scrapes in 10.5 s at 2 s, want 6", n)
		}
		if n := h.eng.active.Load(); n != 0 {
			t.Errorf("%d responses open", n)
		}
	})
}

// An endpoint that flaps every second writes a few lines, then one a
// minute, and the state it settles in is written.
func TestFlappingIsLoggedSparingly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{}, "ok", goodBody)
		for i := range 600 { // ten minutes
			if i%2 == 0 {
				h.eng.set("404", "")
			} else {
				h.eng.set("ok", goodBody)
			}
			time.Sleep(time.Second)
		}
		h.eng.set("404", "")
		time.Sleep(2 * time.Minute)
		lines := h.logs.lines()
		if len(lines) > logBurst+12 {
			t.Errorf("%d lines for 600 changes in 10 minutes", len(lines))
		}
		if last := lines[len(lines)-1]; !strings.Contains(last, "state=missing") {
			t.Errorf("the last line does not name the state it settled in: %s", last)
		}
	})
}

func TestConfig(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1/metrics")
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{URL: u}, true},
		{"no URL", Config{}, false},
		{"relative URL", Config{URL: &url.URL{Path: "/metrics"}}, false},
		{"negative interval", Config{URL: u, Interval: -1}, false},
		{"timeout beyond the interval", Config{URL: u, Interval: time.Second, Timeout: 2 * time.Second}, false},
		{"negative bound", Config{URL: u, MaxBytes: -1}, false},
	} {
		s, err := New(tc.cfg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if tc.ok && (s.interval != time.Second || s.timeout != 750*time.Millisecond || s.maxBytes != DefaultMaxBytes) {
			t.Errorf("%s: defaults %v %v %v", tc.name, s.interval, s.timeout, s.maxBytes)
		}
	}
	var s *Scraper
	if _, ok := s.Latest(); ok || s.Status().State != StateOff {
		t.Error("a nil Scraper is not off")
	}
}

// The Scraper's own transport, against a real server: Run closes its
// connection when it returns (goleak checks), and a second Run fails.
func TestOwnTransport(t *testing.T) {
	srv := newServer(t, goodBody)
	u, _ := url.Parse(srv + "/metrics")
	s, err := New(Config{URL: u, Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for s.Status().Scrapes < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Run(ctx); err == nil {
		t.Error("a second Run did not fail")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r, ok := s.Latest(); !ok || r.KVUsage != 0.5 {
		t.Errorf("Latest %+v %v after %+v", r, ok, s.Status())
	}
}

func newServer(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
