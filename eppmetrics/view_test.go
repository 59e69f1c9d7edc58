package eppmetrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/enginemetrics"
)

// queueing holds every slot of a limiter (its cap) and queues n requests
// more; stop releases them all.
func queueing(t *testing.T, lim *admission.Limiter, n int) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var held []*admission.Ticket
	for i := range lim.Limit() {
		tk, err := lim.Acquire(ctx, admission.Request{Arrival: time.Now(), Fingerprint: uint64(1 + i)})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, tk)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if tk, err := lim.Acquire(ctx, admission.Request{Arrival: time.Now(), Fingerprint: uint64(100 + i)}); err == nil {
				tk.Release()
			}
		})
	}
	for lim.State().Queued < n {
		time.Sleep(time.Millisecond)
	}
	return func() {
		cancel()
		wg.Wait()
		for _, tk := range held {
			tk.Release()
		}
	}
}

// TestReadQueueAndRefusals: waiting is the limiter's queue; a full queue
// (the next request would be refused) or a refused request expected back
// makes the pod saturated, its waiting at least the floor.
func TestReadQueueAndRefusals(t *testing.T) {
	lim := admission.NewLimiter(admission.Config{Limit: 1, MaxQueue: 3, MaxRetryAfter: time.Minute})
	v := New(Config{Limiter: lim, SaturatedWaiting: 5, MaxQueue: 3})
	if n := v.Read(); n.Waiting != 0 || n.Running != 0 || n.Saturated {
		t.Fatalf("idle: %+v", n)
	}
	stop := queueing(t, lim, 2)
	defer stop()
	n := v.Read()
	if n.Waiting != 2 || n.Queued != 2 || n.Running != 1 || n.Saturated || n.Fresh {
		t.Fatalf("two queued: waiting %d, queued %d, running %d, saturated %v, fresh %v", n.Waiting, n.Queued, n.Running, n.Saturated, n.Fresh)
	}
	third := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		tk, err := lim.Acquire(ctx, admission.Request{Arrival: time.Now(), Fingerprint: 3})
		if err == nil {
			tk.Release()
		}
		third <- err
	}()
	for lim.State().Queued < 3 {
		time.Sleep(time.Millisecond)
	}
	if n := v.Read(); !n.Saturated || n.Waiting != 5 || n.Away != 0 {
		t.Fatalf("queue full: saturated %v, waiting %d, away %d; want true, 5 (the floor), 0", n.Saturated, n.Waiting, n.Away)
	}
	// The next request is refused and expected back.
	_, err := lim.Acquire(context.Background(), admission.Request{Arrival: time.Now(), Fingerprint: 7})
	var re *admission.RejectError
	if !errors.As(err, &re) || re.RetryAfter <= 0 {
		t.Fatalf("a fourth request: %v, want a refusal with a Retry-After", err)
	}
	if n := New(Config{Limiter: lim, MaxQueue: 1000}).Read(); n.Waiting != 4 || n.Away != 1 || !n.Saturated {
		t.Fatalf("refusing, without a floor: waiting %d, away %d, saturated %v; want 4 (3 queued + 1 away), 1, true", n.Waiting, n.Away, n.Saturated)
	}
	cancel()
	<-third
}

// TestReadEngine: a fresh reading of the engine adds its own waiting (and
// takes it from kneecap's running: granted past the engine's limit, they
// wait in it) and gives its KV usage, LoRA adapters and cache geometry.
func TestReadEngine(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(vllmBody))
	}))
	defer engine.Close()
	s := startScraper(t, engine.URL)
	lim := admission.NewLimiter(admission.Config{Limit: 4, MaxQueue: 4})
	stop := queueing(t, lim, 2)
	defer stop()
	n := New(Config{Limiter: lim, Engine: s, SaturatedWaiting: 5, MaxQueue: 4}).Read()
	if !n.Fresh || n.EngineWaiting != 3 || n.Waiting != 5 || n.Running != 1 || n.Saturated {
		t.Fatalf("fresh %v, engine waiting %d, waiting %d, running %d, saturated %v; want true, 3, 5, 1 (4 slots, 3 of them waiting in the engine), false", n.Fresh, n.EngineWaiting, n.Waiting, n.Running, n.Saturated)
	}
	if u, ok := n.KVUsage(); !ok || u != 0.42 {
		t.Fatalf("KV usage %v, %v", u, ok)
	}
	if l := n.LoRA(); l == nil || l.Running != "sql-lora" || l.Waiting != "" || l.MaxLoRA != 4 {
		t.Fatalf("LoRA %+v", l)
	}
	if bs, nb, ok := n.Geometry(); !ok || bs != 16 || nb != 1000 {
		t.Fatalf("geometry %d x %d, %v", bs, nb, ok)
	}
}

// vllmBody is an engine's exposition as vLLM writes it, with LoRA on.
const vllmBody = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 6.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.7e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1234.0
`

// startScraper runs a scraper of url until the test ends and waits for its
// first reading.
func startScraper(t *testing.T, raw string) *enginemetrics.Scraper {
	t.Helper()
	u, err := url.Parse(raw + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	// One scrape a second: a reading stays fresh for three, however slow
	// the machine (the first scrape is at once).
	s, err := enginemetrics.New(enginemetrics.Config{URL: u, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := s.Latest(); ok {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatal("no reading of the engine within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
