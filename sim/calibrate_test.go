package sim

import (
	"flag"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
)

// The calibration of docs/sim-calibration.md, checked in CI: each run is the in-process
// harness (harness_test.go) inside a synctest bubble, so simulated minutes
// take milliseconds and every number repeats exactly. Print the tables with
//
//	go test ./sim -run Calibration -v -args -calibrate

var printTables = flag.Bool("calibrate", false, "print the calibration tables of docs/sim-calibration.md")

func closedLoop(t *testing.T, p Profile, w Workload, users int) summary {
	var s summary
	synctest.Test(t, func(t *testing.T) {
		s = runLoad(t, Config{Profile: p, Seed: 1}, load{users: users, requests: max(100, 10*users), work: w, seed: 1})
	})
	if s.failed > 0 {
		t.Fatalf("%s cap %d: %d requests failed", p.Name, users, s.failed)
	}
	return s
}

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

func TestCalibrationTable1(t *testing.T) {
	brief := []struct {
		cap     int
		tokS    float64
		tpotMs  float64
		ttftP50 float64
		ttftP99 float64
	}{
		{1, 175.15, 4.38, 162.98, 270.18},
		{8, 255.63, 22.52, 785.79, 2180.87},
		{32, 252.74, 93.61, 3917.54, 8262.86},
	}
	rows := make([]summary, len(brief))
	if *printTables {
		fmt.Println("| Cap | Output tok/s (brief / sim) | Median TTFT ms | P99 TTFT ms | Median TPOT ms |")
		fmt.Println("|---|---|---|---|---|")
	}
	for i, b := range brief {
		s := closedLoop(t, GB10BF16, Table1Workload, b.cap)
		rows[i] = s
		if *printTables {
			fmt.Printf("| %d | %.2f / %.2f | %.2f / %s | %.2f / %s | %.2f / %s |\n", b.cap, b.tokS, s.tokPerSec,
				b.ttftP50, ms(s.ttftP50), b.ttftP99, ms(s.ttftP99), b.tpotMs, ms(s.tpotP50))
		}
		if !within(s.tokPerSec, b.tokS, 0.25) {
			t.Errorf("cap %d: %.1f tok/s, brief %.1f (more than 25 %% off)", b.cap, s.tokPerSec, b.tokS)
		}
		if tp := float64(s.tpotP50) / 1e6; !within(tp, b.tpotMs, 0.25) {
			t.Errorf("cap %d: median TPOT %.2f ms, brief %.2f (more than 25 %% off)", b.cap, tp, b.tpotMs)
		}
	}
	if flat := rows[2].tokPerSec/rows[1].tokPerSec - 1; math.Abs(flat) > 0.05 {
		t.Errorf("throughput cap 8 -> 32 changed %.1f %%, want within 5 %%", 100*flat)
	}
	growth := float64(rows[2].ttftP50) / float64(rows[1].ttftP50)
	if growth < 3.5 || growth > 7 {
		t.Errorf("median TTFT grew %.2fx from cap 8 to 32, want about 5x", growth)
	}
	if *printTables {
		fmt.Printf("\nthroughput cap 8 -> 32: %+.1f %%; median TTFT x%.2f; median TPOT x%.2f\n\n",
			100*(rows[2].tokPerSec/rows[1].tokPerSec-1), growth, float64(rows[2].tpotP50)/float64(rows[1].tpotP50))
	}
}

func TestCalibrationSecondWorkload(t *testing.T) {
	caps := []int{4, 8, 16, 32}
	briefGood := map[string][]float64{"gb10-bf16": {0.44, 0, 0, 0}, "gb10-fp8": {0.80, 1.07, 1.10, 0}}
	briefTPOT := map[string][]float64{"gb10-bf16": {71.01, 102.21, 154.24, 201.91}, "gb10-fp8": {38.60, 54.96, 81.90, 104.12}}
	res := map[string][]summary{}
	for _, p := range []Profile{GB10BF16, GB10FP8} {
		for _, c := range caps {
			res[p.Name] = append(res[p.Name], closedLoop(t, p, SecondWorkload, c))
		}
	}
	if *printTables {
		fmt.Println("| Cap | BF16 goodput (brief / sim) | BF16 median TPOT ms | FP8 goodput | FP8 median TPOT ms | sim BF16 / FP8 req/s | sim BF16 / FP8 median TTFT ms |")
		fmt.Println("|---|---|---|---|---|---|---|")
		for i, c := range caps {
			b, f := res["gb10-bf16"][i], res["gb10-fp8"][i]
			fmt.Printf("| %d | %.2f / %.2f | %.2f / %s | %.2f / %.2f | %.2f / %s | %.2f / %.2f | %s / %s |\n", c,
				briefGood["gb10-bf16"][i], b.goodput, briefTPOT["gb10-bf16"][i], ms(b.tpotP50),
				briefGood["gb10-fp8"][i], f.goodput, briefTPOT["gb10-fp8"][i], ms(f.tpotP50),
				b.reqPerSec, f.reqPerSec, ms(b.ttftP50), ms(f.ttftP50))
		}
		fmt.Println()
	}
	bf, fp := res["gb10-bf16"], res["gb10-fp8"]
	for i := 1; i < len(caps); i++ {
		if bf[i].goodput >= bf[0].goodput {
			t.Errorf("bf16: goodput at cap %d (%.3f) not below cap 4 (%.3f)", caps[i], bf[i].goodput, bf[0].goodput)
		}
		// "About 0": the brief saw 0 and once 0.04 req/s at cap 8.
		if share := bf[i].goodput / bf[i].reqPerSec; share > 0.15 {
			t.Errorf("bf16 cap %d: %.0f %% of requests good, want about none", caps[i], 100*share)
		}
	}
	for i, c := range caps[:3] {
		if share := fp[i].goodput / fp[i].reqPerSec; share < 0.7 || fp[i].ttftP50 > 1e9 || fp[i].tpotP50 > 1e8 {
			t.Errorf("fp8 cap %d: %.0f %% good, median TTFT %s ms, TPOT %s ms: want the targets met", c, 100*share, ms(fp[i].ttftP50), ms(fp[i].tpotP50))
		}
	}
	if share := fp[3].goodput / fp[3].reqPerSec; share > 0.15 {
		t.Errorf("fp8 cap 32: %.0f %% good, want failing", 100*share)
	}
}

func TestCalibrationOpenLoop(t *testing.T) {
	type run struct {
		p    Profile
		rate float64
	}
	runs := []run{{GB10BF16, 0.5}, {GB10FP8, 0.5}, {GB10FP8, 1}, {GB10FP8, 2}}
	if *printTables {
		fmt.Println("| Engine | Rate req/s | Goodput req/s | Good share | Median TTFT ms | Median TPOT ms | P90 TPOT ms |")
		fmt.Println("|---|---|---|---|---|---|---|")
	}
	for _, r := range runs {
		var s summary
		synctest.Test(t, func(t *testing.T) {
			s = runLoad(t, Config{Profile: r.p, Seed: 1}, load{rate: r.rate, requests: 200, work: SecondWorkload, seed: 2})
		})
		if *printTables {
			fmt.Printf("| %s | %.2f | %.3f | %.0f %% | %s | %s | %s |\n", r.p.Name, r.rate, s.goodput,
				100*float64(s.goodReqs)/float64(max(1, s.completed)), ms(s.ttftP50), ms(s.tpotP50), ms(s.tpotP90))
		}
		if r.p.Name == "gb10-bf16" && s.tpotP50 <= 100e6 {
			t.Errorf("bf16 open loop at %.1f req/s: median TPOT %s ms, want over 100", r.rate, ms(s.tpotP50))
		}
	}
	if *printTables {
		fmt.Println()
	}
}
