package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/wire"
)

// This file is a small load harness that drives the handler in-process (no
// sockets), for use inside a testing/synctest bubble where time is virtual.
// It measures as vLLM's benchmark does (see the brief): TTFT to the first
// chunk carrying output, TPOT = (E2E - TTFT) / (output_tokens - 1) with
// output_tokens from the usage report, E2E to the last output.

// result is one request as the client saw it.
type result struct {
	ttft, e2e time.Duration
	out       int
	ok        bool
}

func (r result) tpot() (time.Duration, bool) {
	if r.out < 2 {
		return 0, false
	}
	return (r.e2e - r.ttft) / time.Duration(r.out-1), true
}

// recorder is a ResponseWriter that timestamps output chunks as they are
// written. The handler writes whole SSE events per Write.
type recorder struct {
	header http.Header
	status int
	start  time.Time
	res    result
	body   bytes.Buffer // non-streamed bodies only
	sse    bool
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
		r.sse = strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream")
	}
}
func (r *recorder) Flush() {}
func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	if !r.sse {
		r.body.Write(p)
		return len(p), nil
	}
	now := time.Now()
	for _, ev := range bytes.Split(p, []byte("\n\n")) {
		data, ok := bytes.CutPrefix(ev, []byte("data: "))
		if !ok || bytes.Equal(data, wire.DoneData) {
			continue
		}
		info, err := wire.Inspect(data)
		if err != nil || info.Error {
			continue
		}
		if info.HasOutput {
			if r.res.ttft == 0 {
				r.res.ttft = now.Sub(r.start)
			}
			r.res.e2e = now.Sub(r.start)
		}
		if info.Usage != nil {
			r.res.out = info.Usage.CompletionTokens
			r.res.ok = true
		}
	}
	return len(p), nil
}

// doRequest sends one streamed chat request of prompt words asking for
// output tokens (ignore_eos) and returns what the client measured.
func doRequest(ctx context.Context, h http.Handler, prompt, output int) result {
	body := fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
		output, strings.Repeat("w ", prompt))
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	rec := &recorder{header: http.Header{}, start: time.Now()}
	h.ServeHTTP(rec, req)
	if rec.status != http.StatusOK {
		rec.res.ok = false
	}
	return rec.res
}

// doWhole sends one chat request that is not streamed and returns its
// output tokens (from usage) and E2E; it costs the harness one body per
// request instead of one chunk per token, for runs that measure only
// throughput.
func doWhole(ctx context.Context, h http.Handler, prompt, output int) result {
	body := fmt.Sprintf(`{"model":"m","ignore_eos":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
		output, strings.Repeat("w ", prompt))
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	rec := &recorder{header: http.Header{}, start: time.Now()}
	h.ServeHTTP(rec, req)
	if rec.status != http.StatusOK {
		return result{}
	}
	var v struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(rec.body.Bytes(), &v); err != nil {
		return result{}
	}
	d := time.Since(rec.start)
	return result{ttft: d, e2e: d, out: v.Usage.CompletionTokens, ok: true}
}

// load describes one harness run: closed loop with users (all starting at
// once, as vLLM's benchmark does), or open loop at rate (Poisson, seeded).
type load struct {
	users    int
	rate     float64 // requests per second of modelled time; open loop if > 0
	requests int
	work     Workload
	seed     uint64
	// whole sends requests that are not streamed (doWhole): throughput
	// only, TTFT and TPOT are not measured.
	whole bool
}

// summary is one row of a calibration table.
type summary struct {
	level                       string
	tokPerSec, reqPerSec        float64
	goodput                     float64 // requests/s that met TTFT <= 1 s and TPOT <= 100 ms
	ttftP50, ttftP99, tpotP50   time.Duration
	tpotP90, ttftP90, duration  time.Duration
	completed, failed, goodReqs int
}

// runLoad runs l against a fresh Sim of cfg. It must be called inside a
// synctest bubble (or with a real clock, for the overhead benchmark).
func runLoad(t testing.TB, cfg Config, l load) summary {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	h := s.Handler()
	do := doRequest
	if l.whole {
		do = doWhole
	}
	results := make([]result, 0, l.requests)
	var mu sync.Mutex
	record := func(r result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	start := time.Now()
	var users sync.WaitGroup
	if l.rate > 0 {
		rng := rand.New(rand.NewPCG(l.seed, 7))
		for range l.requests {
			gap := time.Duration(rng.ExpFloat64() / l.rate * float64(time.Second) / scaleOf(cfg))
			time.Sleep(gap)
			prompt, output := l.work.Lengths(rng)
			users.Go(func() { record(do(ctx, h, prompt, output)) })
		}
	} else {
		// Each user has its own seeded generator and its share of the
		// requests, so lengths do not depend on goroutine scheduling.
		for u := range l.users {
			n := l.requests / l.users
			if u < l.requests%l.users {
				n++
			}
			rng := rand.New(rand.NewPCG(l.seed, uint64(u)))
			users.Go(func() {
				for range n {
					prompt, output := l.work.Lengths(rng)
					record(do(ctx, h, prompt, output))
				}
			})
		}
	}
	users.Wait()
	dur := time.Since(start)
	cancel()
	wg.Wait()
	return summarize(results, dur, cfg.TimeScale)
}

func scaleOf(cfg Config) float64 {
	if cfg.TimeScale == 0 {
		return 1
	}
	return cfg.TimeScale
}

func summarize(rs []result, dur time.Duration, scale float64) summary {
	if scale == 0 {
		scale = 1
	}
	unscale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	dur = unscale(dur)
	var ttfts, tpots []time.Duration
	sum := summary{duration: dur}
	tokens := 0
	for _, r := range rs {
		if !r.ok {
			sum.failed++
			continue
		}
		r.ttft, r.e2e = unscale(r.ttft), unscale(r.e2e)
		sum.completed++
		tokens += r.out
		ttfts = append(ttfts, r.ttft)
		tp, has := r.tpot()
		if has {
			tpots = append(tpots, tp)
		}
		if r.ttft <= time.Second && (!has || tp <= 100*time.Millisecond) {
			sum.goodReqs++
		}
	}
	secs := dur.Seconds()
	sum.tokPerSec = float64(tokens) / secs
	sum.reqPerSec = float64(sum.completed) / secs
	sum.goodput = float64(sum.goodReqs) / secs
	sum.ttftP50, sum.ttftP90, sum.ttftP99 = pct(ttfts, 50), pct(ttfts, 90), pct(ttfts, 99)
	sum.tpotP50, sum.tpotP90 = pct(tpots, 50), pct(tpots, 90)
	return sum
}

// pct is the p-th percentile by linear interpolation (numpy's default, as
// vLLM's benchmark uses).
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	x := p / 100 * float64(len(s)-1)
	i := int(math.Floor(x))
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	f := x - float64(i)
	return s[i] + time.Duration(f*float64(s[i+1]-s[i]))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
