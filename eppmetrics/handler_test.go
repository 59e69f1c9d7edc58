package eppmetrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kneecap/kneecap/admission"
)

// scrape GETs h's /metrics and parses it as the endpoint picker does (the
// text format, legacy name validation).
func scrape(t *testing.T, h http.Handler) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("the answer does not parse: %v\n%s", err, body)
	}
	return fams, string(body)
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil || len(f.GetMetric()) != 1 {
		t.Fatalf("%s: %d series, want 1", name, len(f.GetMetric()))
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

// TestHandlerVLLM: the engine's body passes through, its waiting and
// running replaced by the view's (one series each), its KV usage, LoRA
// and cache lines kept as they were.
func TestHandlerVLLM(t *testing.T) {
	long := "# " + strings.Repeat("x", lineBuffer+10) + "\n"
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(long + vllmBody + "vllm:unfinished_line{a=\"b"))
	}))
	defer engine.Close()
	s := startScraper(t, engine.URL)
	lim := admission.NewLimiter(admission.Config{Limit: 4, MaxQueue: 4})
	stop := queueing(t, lim, 2)
	defer stop()
	v := New(Config{Limiter: lim, Engine: s, SaturatedWaiting: 5, MaxQueue: 4})
	u, _ := url.Parse(engine.URL + "/metrics")
	fams, body := scrape(t, v.Handler(HandlerConfig{Names: VLLM, Engine: u}))
	if got := value(t, fams, "vllm:num_requests_waiting"); got != 5 {
		t.Errorf("waiting %v, want 5 (2 queued in kneecap + 3 in the engine)", got)
	}
	if got := value(t, fams, "vllm:num_requests_running"); got != 1 {
		t.Errorf("running %v, want 1 (4 slots, 3 of them waiting in the engine)", got)
	}
	if got := value(t, fams, "vllm:kv_cache_usage_perc"); got != 0.42 {
		t.Errorf("KV usage %v, want the engine's 0.42", got)
	}
	if fams["vllm:gpu_cache_usage_perc"] != nil {
		t.Error("the older KV name written although the engine's body had the newer one")
	}
	for _, name := range []string{"vllm:lora_requests_info", "vllm:cache_config_info", "vllm:prompt_tokens_total"} {
		if fams[name] == nil {
			t.Errorf("%s not passed through", name)
		}
	}
	if strings.Contains(body, "xxxxxxxx") || strings.Contains(body, "unfinished") {
		t.Error("an over-long or unfinished line was passed")
	}
}

// TestHandlerEngineDown: without the engine's body the view's series are
// answered alone, and still parse.
func TestHandlerEngineDown(t *testing.T) {
	engine := httptest.NewServer(http.NotFoundHandler())
	u, _ := url.Parse(engine.URL + "/metrics")
	engine.Close() // unreachable
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 4})
	stop := queueing(t, lim, 1)
	defer stop()
	fams, _ := scrape(t, New(Config{Limiter: lim, MaxQueue: 4}).Handler(HandlerConfig{Names: SGLang, Engine: u}))
	if got := value(t, fams, "sglang:num_queue_reqs"); got != 1 {
		t.Errorf("waiting %v, want 1", got)
	}
	if got := value(t, fams, "sglang:num_running_reqs"); got != 1 {
		t.Errorf("running %v, want kneecap's 1", got)
	}
	if len(fams) != 2 {
		t.Errorf("%d families, want the two of the view (KV usage unknown)", len(fams))
	}
}

// TestHandlerOtherFamily: a picker told SGLang's names in front of an
// engine that writes vLLM's gets the KV usage under SGLang's name, from the
// view's reading.
func TestHandlerOtherFamily(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(vllmBody))
	}))
	defer engine.Close()
	s := startScraper(t, engine.URL)
	v := New(Config{Limiter: admission.NewLimiter(admission.Config{Limit: 1}), Engine: s})
	u, _ := url.Parse(engine.URL + "/metrics")
	fams, _ := scrape(t, v.Handler(HandlerConfig{Names: SGLang, Engine: u}))
	if got := value(t, fams, "sglang:token_usage"); got != 0.42 {
		t.Errorf("sglang:token_usage %v, want 0.42", got)
	}
	if got := value(t, fams, "vllm:num_requests_waiting"); got != 3 {
		t.Errorf("the engine's own vllm:num_requests_waiting %v, want it passed as it was (3)", got)
	}
}

func TestHandlerMethods(t *testing.T) {
	h := New(Config{Limiter: admission.NewLimiter(admission.Config{Limit: 1})}).Handler(HandlerConfig{Names: VLLM})
	for method, want := range map[string]int{http.MethodGet: 200, http.MethodHead: 200, http.MethodPost: 405} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/metrics", nil))
		if rec.Code != want {
			t.Errorf("%s: %d, want %d", method, rec.Code, want)
		}
	}
}

func TestNamesFor(t *testing.T) {
	for _, f := range []string{"vllm", "sglang"} {
		if n, err := NamesFor(f); err != nil || n.Family != f {
			t.Errorf("%s: %+v, %v", f, n, err)
		}
	}
	if _, err := NamesFor("llamacpp"); err == nil {
		t.Error("llamacpp: no error")
	}
}

// TestHandlerBoundsEngineFetches: the traffic port's /metrics is open to
// anyone; with maxFetches fetches of the engine hanging, another scrape
// is answered at once with the view's series alone, and the engine never
// sees more than maxFetches at a time.
func TestHandlerBoundsEngineFetches(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 2*maxFetches)
	var mu sync.Mutex
	inFlight, most := 0, 0
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		arrived <- struct{}{}
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
		_, _ = w.Write([]byte(vllmBody))
	}))
	defer engine.Close()
	u, _ := url.Parse(engine.URL + "/metrics")
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 4})
	h := New(Config{Limiter: lim, MaxQueue: 4}).Handler(HandlerConfig{Names: VLLM, Engine: u, Timeout: time.Minute})
	srv := httptest.NewServer(h)
	defer srv.Close()
	var wg sync.WaitGroup
	for range maxFetches {
		wg.Go(func() {
			resp, err := http.Get(srv.URL + "/metrics")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	for range maxFetches {
		<-arrived
	}
	fams, _ := scrape(t, h) // beyond the bound: must not wait for the engine
	if fams["vllm:num_requests_waiting"] == nil || fams["vllm:prompt_tokens_total"] != nil {
		t.Errorf("beyond the bound: want the view's series alone, got %d families", len(fams))
	}
	close(release)
	wg.Wait()
	if most > maxFetches {
		t.Errorf("the engine saw %d fetches at once, want at most %d", most, maxFetches)
	}
}
