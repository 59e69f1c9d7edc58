package bench

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/sim"
)

// stepProfile is a simulated engine whose every step takes exactly
// 10 ms + 2 ms per running sequence: no cost per KV or prefill token.
var stepProfile = sim.Profile{
	Name: "steps", Model: "kneecap/steps",
	MaxNumSeqs: 64, KVCacheTokens: 1 << 20, MaxBatchedTokens: 4096, MaxModelLen: 4096,
	StepBase: 10 * time.Millisecond, StepPerSeq: 2 * time.Millisecond,
	MeanOutputTokens: 16,
}

// runSim runs cfg against a simulator with profile p inside the current
// synctest bubble, over net.Pipe connections.
func runSim(t *testing.T, p sim.Profile, cfg Config) Report {
	t.Helper()
	s, err := sim.New(sim.Config{Profile: p, Seed: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	cfg.BaseURL, cfg.Client = "http://sim", servePipe(t, s.Handler())
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Against the simulator, in virtual time: one user sees every decode step at
// 10 + 2x1 = 12 ms, so TPOT and every ITL are exactly 12 ms; with four users
// sharing each step, 10 + 2x4 = 18 ms (less in the moments one of them is
// between requests). ignore_eos makes every request generate max_tokens.
func TestAgainstSimulator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep := runSim(t, stepProfile, Config{
			Levels: []float64{1, 4}, Warmup: time.Second, Duration: 10 * time.Second, IgnoreEOS: true,
			Workload: Synthetic{InputLen: Dist{Mean: 8}, OutputLen: Dist{Mean: 21}},
			Targets:  Targets{TTFT: 100 * time.Millisecond, TPOT: 15 * time.Millisecond},
		})
		one, four := rep.Levels[0].Summary, rep.Levels[1].Summary
		if rep.Model != "kneecap/steps" {
			t.Errorf("model %q", rep.Model)
		}
		if one.Failed+one.Rejected+four.Failed+four.Rejected != 0 {
			t.Fatalf("failures: %+v %+v", one, four)
		}
		if one.TPOT.P50 != 12*time.Millisecond || one.TPOT.Max != 12*time.Millisecond || one.ITL.P99 != 12*time.Millisecond {
			t.Errorf("1 user: TPOT %+v ITL %+v, want 12 ms", one.TPOT, one.ITL)
		}
		if one.TTFT.P50 < 12*time.Millisecond || one.TTFT.P50 > 24*time.Millisecond {
			t.Errorf("1 user: TTFT %v, want one or two steps (12-24 ms)", one.TTFT.P50)
		}
		if one.OutputTokens != 21*one.Completed || one.InputTokens != 8*one.Completed {
			t.Errorf("1 user: %d output, %d input tokens for %d requests", one.OutputTokens, one.InputTokens, one.Completed)
		}
		// 20 decode steps after the first token: at most 18 ms each.
		if four.TPOT.P50 < 16*time.Millisecond || four.TPOT.P99 > 18*time.Millisecond {
			t.Errorf("4 users: TPOT %+v, want 16-18 ms", four.TPOT)
		}
		// Four sequences per 18 ms step against one per 12 ms: about 4x12/18
		// = 2.7 times the tokens per second.
		if one.Attainment != 1 || four.Attainment != 0 || four.OutputThroughput < 2.5*one.OutputThroughput {
			t.Errorf("attainment %v / %v, throughput %v / %v", one.Attainment, four.Attainment, one.OutputThroughput, four.OutputThroughput)
		}
		k := rep.Knee()
		if k.Best != 0 || k.LastMet != 0 {
			t.Errorf("knee %+v", k)
		}
	})
}

// The brief's first workload on the gb10-bf16 profile, in virtual time; the
// table is logged (go test -v -run GB10 ./bench/) and compared in
// docs/bench.md. The assertions are the benchmark's, not the calibration's:
// exact token counts, and latencies that grow with the cap.
func TestGB10Table1(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep := runSim(t, sim.GB10BF16, Config{
			Levels: []float64{1, 8, 32}, Warmup: 20 * time.Second, Duration: 60 * time.Second, IgnoreEOS: true,
			Workload: Synthetic{InputLen: Dist{Mean: 1000}, OutputLen: Dist{Mean: 120}},
			Targets:  Targets{TTFT: time.Second, TPOT: 100 * time.Millisecond},
		})
		var tab strings.Builder
		if err := rep.WriteTable(&tab); err != nil {
			t.Fatal(err)
		}
		t.Logf("gb10-bf16, 1000 prompt / 120 output tokens, virtual time:\n%s", tab.String())
		prev := Summary{}
		for _, lv := range rep.Levels {
			s := lv.Summary
			if s.Completed == 0 || s.Failed+s.Rejected != 0 || s.OutputTokens != 120*s.Completed || s.InputTokens != 1000*s.Completed {
				t.Fatalf("level %g: %+v", lv.Value, s)
			}
			if s.TPOT.P50 <= prev.TPOT.P50 || s.TTFT.P50 <= prev.TTFT.P50 {
				t.Errorf("level %g: TPOT %v TTFT %v did not grow from %v %v", lv.Value, s.TPOT.P50, s.TTFT.P50, prev.TPOT.P50, prev.TTFT.P50)
			}
			prev = s
		}
	})
}

// TestNotStreamedAgainstSimulator: requests sent with "stream": false, all
// of them or every other one, are measured by E2E alone (one user: the
// first token after one step of 12 ms, then 20 more, 21 x 12 = 252 ms)
// and judged by the E2E target; the streamed ones as before.
func TestNotStreamedAgainstSimulator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := Config{
			Levels: []float64{1}, Warmup: time.Second, Duration: 10 * time.Second, IgnoreEOS: true,
			Targets: Targets{TTFT: 100 * time.Millisecond, TPOT: 15 * time.Millisecond, E2E: 260 * time.Millisecond},
		}
		cfg := base
		cfg.NoStream = true
		cfg.Workload = Synthetic{InputLen: Dist{Mean: 8}, OutputLen: Dist{Mean: 21}}
		s := runSim(t, stepProfile, cfg).Levels[0].Summary
		if s.Completed == 0 || s.Good != s.Completed || s.TTFT.N != 0 || s.TPOT.N != 0 || s.ITL.N != 0 || s.E2E.N != s.Completed {
			t.Fatalf("summary %+v", s)
		}
		if s.E2E.P50 < 252*time.Millisecond || s.E2E.P50 > 260*time.Millisecond || s.OutputTokens != 21*s.Completed {
			t.Errorf("E2E %+v, %d output tokens for %d requests; want 252 ms, 21 each", s.E2E, s.OutputTokens, s.Completed)
		}

		// Without an E2E target, an answer that is not streamed is held
		// to the E2E of a stream that meets TTFT and TPOT: 100 + 20 x 15.
		cfg = base
		cfg.Targets.E2E = 0
		cfg.Workload = WorkloadFunc(func(sl Slot) Request {
			return Request{Prompt: Words(sl.Rand, 8), MaxTokens: 21, NoStream: sl.Seq%2 == 1, Class: map[bool]string{true: "whole", false: "stream"}[sl.Seq%2 == 1]}
		})
		lv := runSim(t, stepProfile, cfg).Levels[0]
		var whole, stream int
		for _, r := range lv.Records {
			if r.Outcome != Completed || !r.Measured {
				continue
			}
			if r.NoStream != (r.Class == "whole") || !r.Good {
				t.Fatalf("record %+v", r)
			}
			if r.NoStream {
				whole++
			} else {
				stream++
			}
		}
		if whole == 0 || stream == 0 || lv.Summary.TTFT.N != stream {
			t.Fatalf("%d whole, %d streamed; summary %+v", whole, stream, lv.Summary)
		}
	})
}
