package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func unifiedProfile() Profile {
	p := testProfile()
	p.PrefixCacheTokens, p.StepPerCachedToken, p.UnifiedCache = 1000, time.Microsecond, true
	return p
}

// runToEnd steps until s has ended.
func runToEnd(t *testing.T, e *engine, s *seq) {
	t.Helper()
	for i := 0; s.state.Load() == stateRunning; i++ {
		if i > 1000 {
			t.Fatal("the sequence does not end")
		}
		step(t, e, time.Unix(0, 0))
	}
}

// A slot keeps the cells of the sequence that ended in it until the slot
// takes a new request: the slot idle longest goes first.
func TestUnifiedCacheKeepsCellsUntilTheSlotIsReused(t *testing.T) {
	p := unifiedProfile() // two slots
	e := newEngine(p, nil)
	now := time.Unix(0, 0)
	a := newSeq(5, 3, "length", now)
	e.add(a)
	runToEnd(t, e, a)
	// Prompt 5 and 3 tokens out: 7 cells computed (the last token is never
	// fed back).
	if e.cached != 7 || e.kvUsed != 0 {
		t.Fatalf("after a: cached %d kv %d, want 7 0", e.cached, e.kvUsed)
	}
	b := newSeq(4, 2, "length", now)
	e.add(b)
	// A step of b pays for a's cells: 7 us more than on a fresh engine.
	if d, want := step(t, e, now), p.StepTime(1, 4, 4)+7*time.Microsecond; d != want {
		t.Fatalf("b's first step %v, want %v", d, want)
	}
	runToEnd(t, e, b)
	if e.cached != 7+5 || e.numEnded() != 2 {
		t.Fatalf("after b: cached %d in %d slots, want 12 in 2", e.cached, e.numEnded())
	}
	c := newSeq(3, 2, "length", now)
	e.add(c)
	step(t, e, now) // c takes a's slot, idle longest
	if e.cached != 5 || e.numEnded() != 1 {
		t.Fatalf("c running: cached %d in %d slots, want b's 5 in 1", e.cached, e.numEnded())
	}
	runToEnd(t, e, c)
	if e.cached != 5+4 {
		t.Fatalf("after c: cached %d, want 9", e.cached)
	}
}

// Running sequences take room from the cached cells, oldest first, before
// anything is preempted.
func TestUnifiedCacheGivesRoomToRunningSequences(t *testing.T) {
	p := unifiedProfile()
	p.KVCacheTokens, p.MaxModelLen, p.MaxBatchedTokens, p.MaxNumSeqs = 20, 20, 20, 4
	var obs countingObserver
	e := newEngine(p, &obs)
	now := time.Unix(0, 0)
	a := newSeq(8, 3, "length", now)
	e.add(a)
	runToEnd(t, e, a) // 10 cells
	b := newSeq(7, 3, "length", now)
	e.add(b)
	runToEnd(t, e, b) // 9 more: 19 of 20
	if e.cached != 19 {
		t.Fatalf("cached %d, want 19", e.cached)
	}
	c := newSeq(6, 4, "length", now)
	e.add(c)
	step(t, e, now) // 6 cells: a's 10 go, b's 9 stay (15 of 20)
	if e.cached != 9 || e.kvUsed != 6 {
		t.Fatalf("c admitted: cached %d kv %d, want 9 6", e.cached, e.kvUsed)
	}
	runToEnd(t, e, c)
	if obs.preemptions != 0 || e.cached+e.kvUsed > p.KVCacheTokens {
		t.Fatalf("preemptions %d, cached %d + kv %d beyond %d", obs.preemptions, e.cached, e.kvUsed, p.KVCacheTokens)
	}
	d := newSeq(20, 2, "length", now)
	e.add(d)
	step(t, e, now) // the whole cache
	if e.cached != 0 || e.kvUsed != 20 {
		t.Fatalf("d admitted: cached %d kv %d, want 0 20", e.cached, e.kvUsed)
	}
}

// A request whose client leaves leaves its cells too; PrefixCacheTokens
// bounds what is kept.
func TestUnifiedCacheCancelledAndBounded(t *testing.T) {
	p := unifiedProfile()
	p.PrefixCacheTokens, p.MaxNumSeqs = 12, 8
	e := newEngine(p, nil)
	now := time.Unix(0, 0)
	a := newSeq(5, 10, "length", now)
	e.add(a)
	step(t, e, now)
	step(t, e, now) // 6 cells
	a.cancelled = true
	if _, ok := e.schedule(); ok || e.cached != 6 || e.kvUsed != 0 {
		t.Fatalf("cancelled: cached %d kv %d, want 6 0", e.cached, e.kvUsed)
	}
	b := newSeq(9, 1, "length", now)
	e.add(b)
	runToEnd(t, e, b) // 9 cells: 15 > 12, a's 6 go
	if e.cached != 9 || e.numEnded() != 1 {
		t.Fatalf("bounded: cached %d in %d, want 9 in 1", e.cached, e.numEnded())
	}
	if n := e.flush(); n != 9 || e.cached != 0 || e.numEnded() != 0 {
		t.Fatalf("flush %d, then cached %d in %d", n, e.cached, e.numEnded())
	}
}

// Over HTTP: the llamacpp flavour publishes the cached cells in its KV
// tokens, vLLM and SGLang leave them out; FlushCache drops them and the
// engine is as fast as a fresh one again.
func TestFlavourMetricsAndFlush(t *testing.T) {
	for _, fl := range Flavors() {
		t.Run(string(fl), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := Tiny
				p.PrefixCacheTokens, p.StepPerCachedToken, p.UnifiedCache = 4096, 10*time.Microsecond, true
				s := startSim(t, Config{Profile: p, Flavor: fl})
				first := doRequest(t.Context(), s.Handler(), 100, 20)
				second := doRequest(t.Context(), s.Handler(), 100, 20)
				if !first.ok || !second.ok || second.e2e <= first.e2e {
					t.Fatalf("the second request (%v) is not slower than the first (%v)", second.e2e, first.e2e)
				}
				st := s.Stats()
				if st.CachedTokens != 2*119 || st.KVCacheTokens != 0 {
					t.Fatalf("stats %+v, want 238 cached", st)
				}
				body := scrapeSim(t, s)
				want := map[Flavor][]string{
					FlavorVLLM: {`vllm:kv_cache_usage_perc{model_name="kneecap/tiny"} 0`, `vllm:num_requests_running{model_name="kneecap/tiny"} 0`,
						`vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="256"} 1`},
					FlavorSGLang: {`sglang:token_usage{model_name="kneecap/tiny"} 0`, `sglang:num_used_tokens{model_name="kneecap/tiny"} 0`,
						`sglang:max_total_num_tokens{model_name="kneecap/tiny"} 4096`, `sglang:num_running_reqs{model_name="kneecap/tiny"} 0`,
						`sglang:num_queue_reqs{model_name="kneecap/tiny"} 0`, `sglang:time_to_first_token_seconds_count{model_name="kneecap/tiny"} 2`},
					FlavorLlamaCpp: {"llamacpp:kv_cache_tokens 238\n", "llamacpp:kv_cache_usage_ratio 0.05810546875\n",
						"llamacpp:requests_processing 0\n", "llamacpp:requests_deferred 0\n", "llamacpp:tokens_predicted_total 40\n"},
				}[fl]
				for _, w := range want {
					if !strings.Contains(body, w) {
						t.Errorf("/metrics lacks %q:\n%s", w, body)
					}
				}
				for _, other := range Flavors() {
					if other != fl && strings.Contains(body, string(other)+":") {
						t.Errorf("/metrics of the %s flavour has %s: names", fl, other)
					}
				}
				if n := s.FlushCache(); n != 238 {
					t.Errorf("FlushCache dropped %d, want 238", n)
				}
				if fl == FlavorLlamaCpp && !strings.Contains(scrapeSim(t, s), "llamacpp:kv_cache_tokens 0\n") {
					t.Error("the flush is not published")
				}
				third := doRequest(t.Context(), s.Handler(), 100, 20)
				if third.e2e != first.e2e {
					t.Errorf("after the flush: %v, a fresh engine's %v", third.e2e, first.e2e)
				}
			})
		})
	}
}

func scrapeSim(t *testing.T, s *Sim) string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	return string(b)
}
