package sim

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A log-normal workload is heavy-tailed around its median and clipped.
func TestWorkloadLogNormal(t *testing.T) {
	w := Workload{PromptTokens: 500, OutputTokens: 200, PromptSigma: 1.2, OutputSigma: 0.8, MaxPromptTokens: 8000, MaxOutputTokens: 1500}
	rng := rand.New(rand.NewPCG(1, 2))
	var prompts, outs []int
	for range 20000 {
		p, o := w.Lengths(rng)
		prompts, outs = append(prompts, p), append(outs, o)
	}
	slices.Sort(prompts)
	slices.Sort(outs)
	med := func(v []int) int { return v[len(v)/2] }
	if m := med(prompts); m < 450 || m > 550 {
		t.Errorf("median prompt %d, want about 500", m)
	}
	if m := med(outs); m < 180 || m > 220 {
		t.Errorf("median output %d, want about 200", m)
	}
	// exp(1.2 x 2.326) = 16.3: the P99 prompt is about 8000, clipped there.
	if p99 := prompts[len(prompts)*99/100]; p99 < 5*med(prompts) {
		t.Errorf("P99 prompt %d is not heavy-tailed against the median %d", p99, med(prompts))
	}
	if prompts[len(prompts)-1] != 8000 || outs[len(outs)-1] != 1500 || prompts[0] < 1 || outs[0] < 1 {
		t.Errorf("range prompt [%d, %d], output [%d, %d]; want clipped to 8000 and 1500, at least 1",
			prompts[0], prompts[len(prompts)-1], outs[0], outs[len(outs)-1])
	}
}

// Solo is what one request alone measures on the simulator, exactly.
func TestSoloMatchesTheEngine(t *testing.T) {
	w := Workload{PromptTokens: 3000, OutputTokens: 50}
	p := GB10BF16
	p.MaxBatchedTokens = 1024 // three prefill chunks
	ttft, tpot := p.Solo(w, 0.5, 3, 1)
	synctest.Test(t, func(t *testing.T) {
		s := runLoad(t, Config{Profile: p, Seed: 1}, load{users: 1, requests: 1, work: w, seed: 1})
		if s.ttftP50 != ttft {
			t.Errorf("engine TTFT %v, Solo %v", s.ttftP50, ttft)
		}
		if d := (s.tpotP50 - tpot).Abs(); d > time.Microsecond {
			t.Errorf("engine TPOT %v, Solo %v", s.tpotP50, tpot)
		}
	})
	lo, _ := p.Solo(SecondWorkload, 0.1, 500, 1)
	hi, _ := p.Solo(SecondWorkload, 0.9, 500, 1)
	if lo >= hi {
		t.Errorf("solo TTFT P10 %v not below P90 %v over varied prompts", lo, hi)
	}
}

// With a prefix cache, a request alone gets slower as finished sequences
// fill the cache, up to its capacity, and not without one.
func TestPrefixCacheSlowsSteps(t *testing.T) {
	w := Workload{PromptTokens: 1000, OutputTokens: 100}
	for _, tc := range []struct {
		name      string
		cacheCap  int
		wantGrows bool
	}{{"no cache", 0, false}, {"cache", 2500, true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := Tiny
			p.MaxModelLen, p.KVCacheTokens, p.MaxBatchedTokens = 2048, 4096, 2048
			p.PrefixCacheTokens, p.StepPerCachedToken = tc.cacheCap, time.Microsecond
			synctest.Test(t, func(t *testing.T) {
				s, err := New(Config{Profile: p, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				wg.Go(func() { _ = s.Run(ctx) })
				var e2e []time.Duration
				for range 4 {
					r := doRequest(ctx, s.Handler(), w.PromptTokens, w.OutputTokens)
					if !r.ok {
						t.Fatal("request failed")
					}
					e2e = append(e2e, r.e2e)
				}
				cancel()
				wg.Wait()
				// 1100 tokens per request: 0, 1100, 2200, then 2500 resident.
				grew := e2e[1] > e2e[0] && e2e[2] > e2e[1] && e2e[3] > e2e[2]
				if grew != tc.wantGrows {
					t.Errorf("E2E of four requests in turn %v: grows %v, want %v", e2e, grew, tc.wantGrows)
				}
				if tc.wantGrows {
					// Each step of the fourth costs 300 us more than the third's.
					steps := time.Duration(w.OutputTokens)
					if d := e2e[3] - e2e[2]; d != steps*300*time.Microsecond {
						t.Errorf("fourth request %v slower than the third, want %v (capacity 2500)", d, steps*300*time.Microsecond)
					}
				}
			})
		})
	}
}
