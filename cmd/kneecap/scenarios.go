package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/scenarios"
)

func init() {
	register("scenarios", "run the adaptive-admission scenario suite in virtual time and print the table", runScenarios)
}

func runScenarios(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scenarios", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("scenarios", "", "comma-separated scenario IDs to run (default all 8)")
	caps := fs.String("caps", "1-64", "static caps swept for the oracle: a range A-B or a comma-separated list")
	noPeers := fs.Bool("no-peers", false, "skip the peer algorithms (Envoy gradient, Netflix Gradient2 and AIMD)")
	jsonFile := fs.String("json", "", "write the table as JSON to this file")
	warmup := fs.Duration("warmup", scenarios.DefaultTiming.Warmup, "simulated warm-up of every run, not measured")
	window := fs.Duration("window", scenarios.DefaultTiming.Window, "simulated measured window of every run")
	seed := fs.Uint64("seed", 1, "seed of every run")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "runs at once")
	realTime := fs.Bool("real-time", false, "run the scenarios in real time over TCP on 127.0.0.1 instead, in the modes engine, adaptive and the --caps given (takes --warmup + --window of wall time)")
	knee := fs.Float64("knee", 0.75, "with --real-time: the knee capacity in req/s that sets the open-loop rates")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opt := scenarios.Options{NoPeers: *noPeers, Seed: *seed,
		Timing: scenarios.Timing{Warmup: *warmup, Window: *window}}
	var err error
	if opt.Scenarios, err = parseInts(*only); err != nil {
		return usagef("--scenarios: %v", err)
	}
	if opt.Caps, err = parseCaps(*caps); err != nil {
		return usagef("--caps: %v", err)
	}
	if *window <= 0 || *warmup < 0 {
		return usagef("--window must be positive and --warmup not negative")
	}
	if *realTime {
		return runRealTime(ctx, opt, *knee, stdout)
	}
	var suite *scenarios.Suite
	opt.Progress = func(sc scenarios.Scenario, r scenarios.RunResult) {
		fmt.Fprintf(stderr, "scenario %d %-16s %-18s goodput %.3f req/s (wall %v)\n", sc.ID, sc.Name, r.Mode+capSuffix(r), r.Goodput, r.Wall.Round(1e6))
	}
	if err := scenarios.InBubbles(*parallel, stderr, func(t *testing.T) { suite = scenarios.RunSuite(t, opt) }); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := scenarios.WriteTable(stdout, suite); err != nil {
		return err
	}
	if *jsonFile != "" {
		f, err := os.Create(*jsonFile)
		if err != nil {
			return err
		}
		if err := scenarios.WriteJSON(f, suite); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return nil
}

func capSuffix(r scenarios.RunResult) string {
	if r.Mode == "static" {
		return "-" + strconv.Itoa(r.Cap)
	}
	return ""
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseCaps(s string) ([]int, error) {
	if a, b, ok := strings.Cut(s, "-"); ok {
		lo, err1 := strconv.Atoi(a)
		hi, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || lo < 1 || hi < lo {
			return nil, fmt.Errorf("%q is not a range A-B with 1 <= A <= B", s)
		}
		var out []int
		for c := lo; c <= hi; c++ {
			out = append(out, c)
		}
		return out, nil
	}
	out, err := parseInts(s)
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("no caps")
	}
	return out, err
}

// runRealTime runs each chosen scenario in real time, its modes at once.
func runRealTime(ctx context.Context, opt scenarios.Options, knee float64, stdout io.Writer) error {
	modes := []scenarios.Mode{{Kind: "engine"}, {Kind: "adaptive"}}
	if len(opt.Caps) <= 8 {
		for _, c := range opt.Caps {
			modes = append(modes, scenarios.Mode{Kind: "static", Cap: c})
		}
	}
	for _, sc := range scenarios.All() {
		if len(opt.Scenarios) > 0 && !slices.Contains(opt.Scenarios, sc.ID) {
			continue
		}
		res, err := scenarios.RunRealTime(ctx, sc, modes, opt.Timing, knee, opt.Seed)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "scenario %d %s, real time over TCP on 127.0.0.1, %v warm-up + %v window\n", sc.ID, sc.Name, opt.Timing.Warmup, opt.Timing.Window)
		fmt.Fprintf(stdout, "%-10s %8s %6s %9s %9s %11s %9s %6s\n", "mode", "cap", "good", "completed", "rejected", "goodput/s", "p50 TTFT", "final")
		for _, r := range res {
			fmt.Fprintf(stdout, "%-10s %8d %6d %9d %9d %11.3f %9s %6d\n", r.Mode, r.Cap, r.Good, r.Completed, r.Rejected, r.Goodput, r.MedianTTFT.Round(time.Millisecond), r.FinalCap)
		}
	}
	return nil
}
