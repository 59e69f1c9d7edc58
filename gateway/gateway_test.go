package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/proxy/proxytest"
	"github.com/kneecap/kneecap/slo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness runs a gateway on 127.0.0.1 in front of an engine handler.
type harness struct {
	g              *Gateway
	reg            *prometheus.Registry
	traffic, admin string
	cancel         context.CancelFunc
	done           chan error
	stopOnce       sync.Once
}

func start(t *testing.T, engine http.Handler, cfg Config, opts ...Option) *harness {
	t.Helper()
	eng := httptest.NewServer(engine)
	t.Cleanup(eng.Close)
	cfg.Upstream, _ = url.Parse(eng.URL)
	base, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=" + eng.URL})
	if err != nil {
		t.Fatal(err)
	}
	fill(&cfg, base)
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	h := &harness{reg: prometheus.NewRegistry(), traffic: "http://" + tl.Addr().String(), admin: "http://" + al.Addr().String(), done: make(chan error, 1)}
	// The bare gateway unless a test wires a controller.
	opts = append([]Option{WithStaticCap()}, append(opts, WithListeners(tl, al), WithRegistry(h.reg))...)
	if h.g, err = New(cfg, opts...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.g.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	return h
}

// fill sets zero fields of cfg from the defaults.
func fill(cfg *Config, d Config) {
	if cfg.SLOTTFT == 0 {
		cfg.SLOTTFT = d.SLOTTFT
	}
	if cfg.SLOTPOT == 0 {
		cfg.SLOTPOT = d.SLOTPOT
	}
	if cfg.SLOWindow == 0 {
		cfg.SLOWindow = d.SLOWindow
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = d.MaxQueue
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = d.MaxBodyBytes
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = d.DrainTimeout
	}
	cfg.UpstreamHealthPath, cfg.LogFormat = d.UpstreamHealthPath, d.LogFormat
	cfg.SLOPercentile, cfg.MinCap, cfg.PrefillPacing = d.SLOPercentile, d.MinCap, d.PrefillPacing
}

// stop ends Run and checks that it returned cleanly; later calls do nothing.
func (h *harness) stop(t *testing.T) {
	h.stopOnce.Do(func() {
		h.cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return")
		}
	})
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestOpenAIClientStreams streams through the gateway with the official Go
// client, then checks what the gateway measured and exports.
func TestOpenAIClientStreams(t *testing.T) {
	h := start(t, &proxytest.Engine{Flavor: proxytest.VLLM, Chunks: 6, TokensPerChunk: 3}, Config{})
	client := openai.NewClient(option.WithBaseURL(h.traffic+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var acc openai.ChatCompletionAccumulator
	sawUsageOnly := false
	for stream.Next() {
		c := stream.Current()
		acc.AddChunk(c)
		if len(c.Choices) == 0 {
			sawUsageOnly = true
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != strings.Repeat("tok ", 18) || sawUsageOnly {
		t.Fatalf("content %q, usage-only chunk seen %v", got, sawUsageOnly)
	}

	// The stream with usage asked for keeps it.
	stream = client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc = openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || acc.Usage.CompletionTokens != 18 {
		t.Fatalf("err %v, usage %+v", err, acc.Usage)
	}

	// A request is judged just after its last byte leaves the gateway, so the
	// client may finish reading a moment before the record is counted.
	good := func() float64 {
		return testutil.ToFloat64(mustCounter(t, h.reg, "kneecap_requests_total", map[string]string{"route": "chat", "outcome": "good"}))
	}
	waitFor(t, func() bool { return good() >= 2 })
	if n := good(); n != 2 {
		t.Fatalf("kneecap_requests_total{chat,good} = %v, want 2", n)
	}
	code, body := get(t, h.admin+"/status")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
		t.Fatalf("status %d %v: %s", code, err, body)
	}
	if st.Window.Good != 2 || st.Window.TTFT.Count != 2 || st.Window.ITL.Count != 10 || st.Limit != DefaultMaxConcurrency || st.Window.Attainment != 1 {
		t.Fatalf("/status %+v", st)
	}
	if code, _ := get(t, h.admin+"/readyz"); code != 200 {
		t.Fatalf("/readyz = %d", code)
	}
	if code, _ := get(t, h.admin+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
			c.Add(m.GetCounter().GetValue())
			return c
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return nil
}

// TestMetricNames checks that every metric named in the common brief is
// exported, and the admin endpoint serves them.
func TestMetricNames(t *testing.T) {
	h := start(t, &proxytest.Engine{}, Config{})
	resp, err := http.Post(h.traffic+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"a","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	_, body := get(t, h.admin+"/metrics")
	for _, name := range []string{
		"kneecap_requests_total", "kneecap_ttft_seconds", "kneecap_tpot_seconds", "kneecap_itl_seconds",
		"kneecap_e2e_seconds", "kneecap_queue_wait_seconds", "kneecap_output_tokens_total", "kneecap_running",
		"kneecap_queued", "kneecap_concurrency_limit", "kneecap_rejections_total",
		"kneecap_goodput_requests_per_second", "kneecap_slo_attainment_ratio", "kneecap_demand_ratio",
		"kneecap_upstream_retries_total",
	} {
		if !strings.Contains(body, "\n"+name) && !strings.HasPrefix(body, name) {
			t.Errorf("metric %s missing from /metrics", name)
		}
	}
	for _, series := range []string{`kneecap_ttft_seconds_count{kind="client"} 1`, `kneecap_ttft_seconds_count{kind="engine"} 1`, `kneecap_output_tokens_total 4`,
		"kneecap_itl_seconds_count 3", `kneecap_itl_seconds_bucket{le="+Inf"} 3`} { // every gap of the stream, once it has ended
		if !strings.Contains(body, series) {
			t.Errorf("series %q missing", series)
		}
	}
}

func TestDemandRatio(t *testing.T) {
	st := admission.State{Limit: 4, Running: 4, Queued: 2}
	ws := slo.Stats{RejectionRate: 0.5, E2E: slo.Quantiles{Mean: 4 * time.Second, Count: 10}}
	if got := DemandRatio(st, ws); got != 2 { // (4 + 2 + 0.5 x 4) / 4
		t.Fatalf("DemandRatio = %v, want 2", got)
	}
}

// TestDrain checks SIGTERM behaviour: the queued request gets 503
// (draining) with Retry-After, the running stream finishes whole, and Run
// returns.
func TestDrain(t *testing.T) {
	eng := &proxytest.Engine{Flavor: proxytest.VLLM, Chunks: 5, Gap: 100 * time.Millisecond}
	h := start(t, eng, Config{MaxConcurrency: 1, MaxQueueWait: time.Minute})
	body := `{"model":"m","stream":true,"messages":[]}`
	type result struct {
		code   int
		reason string
		retry  string
		body   string
	}
	do := func() result {
		resp, err := http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return result{body: err.Error()}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return result{resp.StatusCode, resp.Header.Get(proxy.HeaderReason), resp.Header.Get("Retry-After"), string(b)}
	}
	var running, queued result
	var wg sync.WaitGroup
	wg.Go(func() { running = do() })
	waitFor(t, func() bool { return h.g.Limiter().Running() == 1 })
	wg.Go(func() { queued = do() })
	waitFor(t, func() bool { return h.g.Limiter().State().Queued == 1 })
	h.cancel()
	wg.Wait()
	if queued.code != 503 || queued.reason != "draining" || queued.retry == "" {
		t.Fatalf("queued request: %+v", queued)
	}
	if running.code != 200 || !strings.HasSuffix(running.body, "data: [DONE]\n\n") {
		t.Fatalf("running stream cut: %+v", running)
	}
	if code, _ := getNoFail(h.admin + "/readyz"); code == 200 {
		t.Fatal("/readyz ready while draining")
	}
}

func getNoFail(u string) (int, error) {
	resp, err := http.Get(u)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestDrainTimeoutCutsStreams checks that a stream still running at the
// drain timeout is cut and Run still returns.
func TestDrainTimeoutCutsStreams(t *testing.T) {
	eng := &proxytest.Engine{Chunks: 1000, Gap: 50 * time.Millisecond}
	h := start(t, eng, Config{DrainTimeout: 200 * time.Millisecond})
	resp, err := http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h.stop(t)
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Log("stream ended cleanly after cut (server closed it)")
	}
	if h.g.Limiter().Running() != 0 {
		t.Fatal("slot leaked after cut")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
	}
}

// fakeController stands in for the adaptive controller of issue 5.
type fakeController struct {
	lim   *admission.Limiter
	mu    sync.Mutex
	done  int
	ran   chan struct{}
	ended chan struct{}
}

func (c *fakeController) Run(ctx context.Context) error {
	c.lim.SetLimit(3)
	close(c.ran)
	<-ctx.Done()
	close(c.ended)
	return nil
}
func (c *fakeController) FirstChunk(proxy.FirstChunk) {}
func (c *fakeController) Chunk(proxy.Chunk)           {}
func (c *fakeController) Done(slo.Record)             { c.mu.Lock(); c.done++; c.mu.Unlock() }
func (c *fakeController) Admit(admission.Request, admission.State) (bool, time.Duration) {
	return false, 3 * time.Second
}
func (c *fakeController) Status() any { return map[string]any{"reason": "test"} }

func TestControllerWiring(t *testing.T) {
	fc := &fakeController{ran: make(chan struct{}), ended: make(chan struct{})}
	h := start(t, &proxytest.Engine{}, Config{}, WithCapControl(func(host Host) (CapControl, error) {
		fc.lim = host.Limiter
		return fc, nil
	}))
	<-fc.ran
	resp, err := http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	_, body := get(t, h.admin+"/status")
	var st Status
	_ = json.Unmarshal([]byte(body), &st)
	if st.Limit != 3 || !st.Adaptive || st.Controller == nil {
		t.Fatalf("/status %s", body)
	}
	fc.mu.Lock()
	done := fc.done
	fc.mu.Unlock()
	if done != 1 {
		t.Fatalf("controller observed %d records, want 1", done)
	}
	// The gate is installed: a request that would queue is refused (deadline).
	for range 3 {
		host := h.g.Limiter()
		_, _ = host.Acquire(t.Context(), admission.Request{}) // fill the 3 slots; released never (test ends)
	}
	resp, err = http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get(proxy.HeaderReason) != "deadline" || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	h.stop(t)
	<-fc.ended
}

// TestNotStreamedStatus: /status names the routes that reassemble a
// request that is not streamed and those that relay it whole, and counts
// both; so does kneecap_not_streamed_requests_total.
func TestNotStreamedStatus(t *testing.T) {
	h := start(t, &proxytest.Engine{Flavor: proxytest.VLLM, Chunks: 3}, Config{})
	for _, body := range []string{`{"model":"m","messages":[]}`, `{"model":"m","messages":[],"prompt_logprobs":1}`} {
		resp, err := http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"object":"chat.completion"`) {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
	count := func(relay string) float64 {
		return testutil.ToFloat64(mustCounter(t, h.reg, "kneecap_not_streamed_requests_total", map[string]string{"route": "chat", "relay": relay}))
	}
	waitFor(t, func() bool { return count("reassembled") == 1 && count("whole") == 1 })
	var st Status
	code, body := get(t, h.admin+"/status")
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
		t.Fatalf("/status %d %v: %s", code, err, body)
	}
	ns := st.NotStreamed
	if !slices.Contains(ns.ReassembledRoutes, "/v1/chat/completions") || !slices.Contains(ns.ReassembledRoutes, "/v1/completions") ||
		!slices.Contains(ns.WholeRoutes, "/v1/responses") || !slices.Contains(ns.WholeRoutes, "/generate") ||
		!slices.Contains(ns.WholeOnlyFields, "prompt_logprobs") || ns.Reassembled != 1 || ns.Whole != 1 {
		t.Fatalf("not_streamed %+v", ns)
	}
}
