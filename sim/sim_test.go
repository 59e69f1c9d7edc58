package sim

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// startSim runs a Sim for the test's duration; it must be called inside a
// synctest bubble or with a real clock.
func startSim(t *testing.T, cfg Config) *Sim {
	t.Helper()
	s := newSim(t, cfg)
	run(t, s)
	return s
}

func newSim(t *testing.T, cfg Config) *Sim {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, s *Sim) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func quietProfile() Profile {
	p := testProfile()
	p.StepPerKVToken = 0
	p.MaxNumSeqs, p.KVCacheTokens, p.MaxModelLen, p.MaxBatchedTokens = 64, 10_000, 2000, 1000
	return p
}

func TestTimingIsExactInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := quietProfile()
		s := startSim(t, Config{Profile: p})
		r := doRequest(t.Context(), s.Handler(), 10, 5)
		ttft := p.StepTime(1, 10, 10)
		tpot := p.StepTime(1, 0, 0)
		if !r.ok || r.out != 5 || r.ttft != ttft || r.e2e != ttft+4*tpot {
			t.Fatalf("got %+v, want ttft %v e2e %v", r, ttft, ttft+4*tpot)
		}
	})
}

func TestTPOTGrowsWithConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := quietProfile()
		s := newSim(t, Config{Profile: p})
		var wg sync.WaitGroup
		rs := make([]result, 8)
		for i := range rs {
			wg.Go(func() { rs[i] = doRequest(t.Context(), s.Handler(), 10, 20) })
		}
		synctest.Wait() // all 8 queued before the engine starts
		run(t, s)
		wg.Wait()
		// All 8 join in the same step and decode together.
		want := p.StepTime(8, 0, 0)
		for _, r := range rs {
			if tp, _ := r.tpot(); tp != want {
				t.Fatalf("tpot %v, want %v (8 sequences per step)", tp, want)
			}
		}
	})
}

func TestStepFactorAndTimeScale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := quietProfile()
		s := startSim(t, Config{Profile: p, TimeScale: 4})
		r := doRequest(t.Context(), s.Handler(), 10, 2)
		if want := p.StepTime(1, 10, 10) / 4; r.ttft != want {
			t.Fatalf("scaled ttft %v, want %v", r.ttft, want)
		}
		s.SetStepFactor(1.5)
		r = doRequest(t.Context(), s.Handler(), 10, 2)
		if want := time.Duration(float64(p.StepTime(1, 10, 10)) * 1.5 / 4); r.ttft != want {
			t.Fatalf("slowed ttft %v, want %v", r.ttft, want)
		}
	})
}

func TestSeededOutputLengthsRepeat(t *testing.T) {
	lengths := func() []int {
		s, err := New(Config{Profile: Tiny, Seed: 42})
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for range 20 {
			out = append(out, s.drawFor(100, false).outTokens)
		}
		return out
	}
	a, b := lengths(), lengths()
	distinct := map[int]bool{}
	for i := range a {
		if a[i] != b[i] || a[i] < 1 || a[i] > 100 {
			t.Fatalf("draw %d: %d vs %d", i, a[i], b[i])
		}
		distinct[a[i]] = true
	}
	if len(distinct) < 5 {
		t.Fatalf("output lengths barely vary: %v", a)
	}
}

func TestNonStreamed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startSim(t, Config{Profile: quietProfile()})
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(`{"model":"x","prompt":[1,2,3],"max_tokens":3,"ignore_eos":true}`))
		s.Handler().ServeHTTP(rec, req)
		body := rec.Body.String()
		if rec.Code != 200 || !strings.Contains(body, `"usage":{"prompt_tokens":3,"total_tokens":6,"completion_tokens":3,"prompt_tokens_details":null}`) ||
			!strings.Contains(body, `"finish_reason":"length"`) {
			t.Fatalf("%d %s", rec.Code, body)
		}
	})
}

func TestBadRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startSim(t, Config{Profile: quietProfile()}) // max_model_len 2000
		for _, tt := range []struct{ path, body string }{
			{"/v1/completions", `{"prompt":`},
			{"/v1/completions", `{"model":"m"}`},
			{"/v1/completions", `{"prompt":"a b","max_tokens":0}`},
			{"/v1/completions", `{"prompt":"a b","max_tokens":1999}`},
			{"/v1/completions", `{"prompt":["a","b"]}`},
			{"/v1/chat/completions", `{"messages":[]}`},
			{"/v1/chat/completions", `{"messages":[{"content":5}]}`},
			{"/v1/chat/completions", `{"messages":[{"content":"hi"}],"n":2}`},
		} {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body)))
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"type":"invalid_request_error"`) {
				t.Errorf("%s %s: %d %s", tt.path, tt.body, rec.Code, rec.Body.String())
			}
		}
	})
}

func TestPromptCounting(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want int
	}{
		{`"one two  three\nfour"`, 4}, {`[5, 6, 7]`, 3}, {`["a b c"]`, 3}, {`[[1,2]]`, 2}, {`""`, 0},
	} {
		if got, err := promptTokens([]byte(tt.raw), nil); err != nil || got != tt.want {
			t.Errorf("promptTokens(%s) = %d, %v; want %d", tt.raw, got, err, tt.want)
		}
	}
	n, err := contentWords([]byte(`[{"type":"text","text":"a b"},{"type":"text","text":"c"}]`), nil)
	if err != nil || n != 3 {
		t.Errorf("contentWords(parts) = %d, %v", n, err)
	}
}

func TestModelsHealthMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startSim(t, Config{Profile: quietProfile()})
		doRequest(t.Context(), s.Handler(), 5, 3)
		get := func(path string) (int, string) {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			b, _ := io.ReadAll(rec.Body)
			return rec.Code, string(b)
		}
		if code, body := get("/v1/models"); code != 200 || !strings.Contains(body, `"id":"test"`) {
			t.Errorf("/v1/models: %d %s", code, body)
		}
		if code, _ := get("/health"); code != 200 {
			t.Errorf("/health: %d", code)
		}
		code, body := get("/metrics")
		for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
			"vllm:gpu_cache_usage_perc", "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
			"vllm:time_per_output_token_seconds_count", "vllm:e2e_request_latency_seconds_count", "vllm:num_preemptions_total",
			"vllm:request_time_per_output_token_seconds_count", `vllm:request_success_total{finished_reason="length",model_name="test"} 1`} {
			if code != 200 || !strings.Contains(body, name) {
				t.Errorf("/metrics lacks %s", name)
			}
		}
		if code, _ := get("/nope"); code != 404 {
			t.Errorf("/nope: %d", code)
		}
	})
}

// With Stagger, the outputs of one step reach their streams one after the
// other in batch order, Stagger apart; without it, all at the step's end.
func TestStaggerSpacesOneStepsOutputs(t *testing.T) {
	for _, stagger := range []time.Duration{0, time.Microsecond} {
		synctest.Test(t, func(t *testing.T) {
			s := startSim(t, Config{Profile: quietProfile(), Stagger: stagger})
			rs := make([]result, 3)
			var wg sync.WaitGroup
			for i := range rs {
				wg.Go(func() { rs[i] = doRequest(t.Context(), s.Handler(), 10, 5) })
			}
			wg.Wait()
			var ttfts, e2es []time.Duration
			for _, r := range rs {
				if !r.ok || r.out != 5 {
					t.Fatalf("stagger %v: request failed: %+v", stagger, r)
				}
				ttfts, e2es = append(ttfts, r.ttft), append(e2es, r.e2e)
			}
			slices.Sort(ttfts)
			slices.Sort(e2es)
			for i := 1; i < len(rs); i++ {
				if d := ttfts[i] - ttfts[i-1]; d != stagger {
					t.Errorf("stagger %v: first tokens %v apart, want %v (%v)", stagger, d, stagger, ttfts)
				}
				if d := e2es[i] - e2es[i-1]; d != stagger {
					t.Errorf("stagger %v: last tokens %v apart, want %v (%v)", stagger, d, stagger, e2es)
				}
			}
		})
	}
}
