package sim

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The datacenter profiles' calibration (docs/sim-calibration.md, "Datacenter
// profiles"): published measurements of vLLM serving Llama 3.1 on H100s,
// checked in CI in virtual time (4 s, 18 s under the race detector). Print the tables with
//
//	go test ./sim -run CalibrationDatacenter -v -args -calibrate

// sweepRow is one published concurrency level: output tok/s, median TTFT
// and median TPOT (ms); 0 where the source gives none.
type sweepRow struct {
	users            int
	tokS, ttft, tpot float64
}

func TestCalibrationDatacenter8B(t *testing.T) {
	// InferenceBench's concurrency sweep of Llama-3.1-8B-Instruct, fp16,
	// vLLM 0.21.0 on one H100-80GB-HBM3 (its "chatbot-short" workload;
	// the prompt length is inferred from the TTFT at concurrency 1).
	rows := []sweepRow{{1, 122.2, 13.98, 6.48}, {4, 580.3, 22.75, 6.59}, {16, 1384.2, 41.69, 10.94}, {64, 1312.3, 86.92, 46.91}}
	w := Workload{PromptTokens: 230, OutputTokens: 200, RangeRatio: 0.5}
	got := make([]summary, len(rows))
	if *printTables {
		fmt.Println("| Users | Output tok/s (measured / sim) | Median TTFT ms | Median TPOT ms |")
		fmt.Println("|---|---|---|---|")
	}
	for i, r := range rows {
		got[i] = dcLoad(t, H1008B, w, r.users, 4*r.users)
		if *printTables {
			fmt.Printf("| %d | %.0f / %.0f | %.2f / %s | %.2f / %s |\n", r.users, r.tokS, got[i].tokPerSec, r.ttft, ms(got[i].ttftP50), r.tpot, ms(got[i].tpotP50))
		}
	}
	if tp := float64(got[0].tpotP50) / 1e6; !within(tp, rows[0].tpot, 0.15) {
		t.Errorf("concurrency 1: median TPOT %.2f ms, measured %.2f (more than 15 %% off)", tp, rows[0].tpot)
	}
	if tt := float64(got[0].ttftP50) / 1e6; !within(tt, rows[0].ttft, 0.25) {
		t.Errorf("concurrency 1: median TTFT %.2f ms, measured %.2f (more than 25 %% off)", tt, rows[0].ttft)
	}
	// Saturated: the published figure of about 12,500 output tok/s (BF16,
	// FlashInfer), short prompts and long answers, every sequence slot full.
	var sat summary
	synctest.Test(t, func(t *testing.T) {
		sat = runLoad(t, Config{Profile: H1008B, Seed: 1}, load{users: 1024, requests: 2048, whole: true,
			work: Workload{PromptTokens: 128, OutputTokens: 512, RangeRatio: 0.5}, seed: 1})
	})
	if *printTables {
		fmt.Printf("\nsaturated (1024 users, 128/512 tokens): %.0f output tok/s (published: about 12,500)\n\n", sat.tokPerSec)
	}
	if !within(sat.tokPerSec, 12500, 0.10) {
		t.Errorf("saturated: %.0f output tok/s, published about 12,500 (more than 10 %% off)", sat.tokPerSec)
	}
	// The knee of the workload (800/200 tokens, TPOT target 50 ms)
	// lies between 64 and 512 users: TPOT meets it at 64 and misses at 512.
	iw := Workload{PromptTokens: 800, OutputTokens: 200, RangeRatio: 0.5}
	lo, hi := dcLoad(t, H1008B, iw, 64, 128), dcLoad(t, H1008B, iw, 512, 512)
	if *printTables {
		fmt.Printf("800/200 tokens: median TPOT %s ms at 64 users, %s ms at 512; %.0f / %.0f output tok/s\n\n", ms(lo.tpotP50), ms(hi.tpotP50), lo.tokPerSec, hi.tokPerSec)
	}
	if lo.tpotP50 >= 50*time.Millisecond || hi.tpotP50 <= 50*time.Millisecond {
		t.Errorf("800/200 tokens: median TPOT %s ms at 64 users and %s ms at 512; want the 50 ms target met at 64 and missed at 512",
			ms(lo.tpotP50), ms(hi.tpotP50))
	}
}

func TestCalibrationDatacenter70B(t *testing.T) {
	// Lambda's vllm-benchmark, 4xH100-80GB-SXM, Meta-Llama-3-70B-Instruct,
	// tensor parallel 4, 10 ShareGPT prompts sent at once: these lengths
	// (two answers were empty: one token here), median TTFT 140.56 ms,
	// median TPOT 18.12 ms.
	prompts := []int{13, 25, 27, 10, 329, 29, 399, 328, 4, 205}
	outputs := []int{120, 661, 233, 194, 101, 741, 1, 1, 6, 35}
	var s summary
	synctest.Test(t, func(t *testing.T) { s = runBatch(t, Config{Profile: H100x470B, Seed: 1}, prompts, outputs) })
	if *printTables {
		fmt.Println("| Run | Median TTFT ms (measured / sim) | Median TPOT ms |")
		fmt.Println("|---|---|---|")
		fmt.Printf("| 10 prompts at once | 140.56 / %s | 18.12 / %s |\n\n", ms(s.ttftP50), ms(s.tpotP50))
	}
	if tt := float64(s.ttftP50) / 1e6; !within(tt, 140.56, 0.15) {
		t.Errorf("median TTFT %.2f ms, measured 140.56 (more than 15 %% off)", tt)
	}
	if tp := float64(s.tpotP50) / 1e6; !within(tp, 18.12, 0.15) {
		t.Errorf("median TPOT %.2f ms, measured 18.12 (more than 15 %% off)", tp)
	}
	// Its knee on the workload sits lower than the 8B's: TPOT
	// meets 50 ms at 64 users and misses it at 256.
	iw := Workload{PromptTokens: 800, OutputTokens: 200, RangeRatio: 0.5}
	lo, hi := dcLoad(t, H100x470B, iw, 64, 128), dcLoad(t, H100x470B, iw, 256, 256)
	if *printTables {
		fmt.Printf("800/200 tokens: median TPOT %s ms at 64 users, %s ms at 256; %.0f / %.0f output tok/s\n\n", ms(lo.tpotP50), ms(hi.tpotP50), lo.tokPerSec, hi.tokPerSec)
	}
	if lo.tpotP50 >= 50*time.Millisecond || hi.tpotP50 <= 50*time.Millisecond {
		t.Errorf("800/200 tokens: median TPOT %s ms at 64 users and %s ms at 256; want 50 ms met at 64 and missed at 256", ms(lo.tpotP50), ms(hi.tpotP50))
	}
}

// dcLoad runs a closed loop of users against a fresh engine of p in a
// synctest bubble, requests in all.
func dcLoad(t *testing.T, p Profile, w Workload, users, requests int) summary {
	var s summary
	synctest.Test(t, func(t *testing.T) {
		s = runLoad(t, Config{Profile: p, Seed: 1}, load{users: users, requests: requests, work: w, seed: 1})
	})
	if s.failed > 0 {
		t.Fatalf("%s, %d users: %d requests failed", p.Name, users, s.failed)
	}
	return s
}

// runBatch sends one request of each prompts[i]/outputs[i] at the same
// instant, as a benchmark with an infinite request rate does, and
// summarizes them. Call it inside a synctest bubble.
func runBatch(t testing.TB, cfg Config, prompts, outputs []int) summary {
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	h := s.Handler()
	results := make([]result, len(prompts))
	start := time.Now()
	var reqs sync.WaitGroup
	for i := range prompts {
		reqs.Go(func() { results[i] = doRequest(ctx, h, prompts[i], outputs[i]) })
	}
	reqs.Wait()
	dur := time.Since(start)
	cancel()
	wg.Wait()
	return summarize(results, dur, cfg.TimeScale)
}
