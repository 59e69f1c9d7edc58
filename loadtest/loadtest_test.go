package loadtest

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kneecap/kneecap/bench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The full run's flags (scripts/load-test passes them).
var (
	flagJSON   = flag.String("json-out", "", "TestLoadFull: write the results as JSON to this file")
	flagTable  = flag.String("table-out", "", "TestLoadFull: write the table (Markdown) to this file")
	flagAtOnce = flag.Int("at-once", 4, "TestLoadFull: runs at once, each with its own engine, gateway and users")
	flagWarmup = flag.Duration("warmup", 30*time.Second, "TestLoadFull: warm-up of each run")
	flagWindow = flag.Duration("window", 60*time.Second, "TestLoadFull: measured window of each run")
	flagSeed   = flag.Uint64("seed", 1, "TestLoadFull: the users' seed")
	flagLabel  = flag.String("label", "", "TestLoadFull: a line written above the table (the commit measured, say)")
)

// TestLoad is the short version CI runs: on each stack, the adaptive
// gateway with the users and a static cap of 3 with the OpenAI
// SDKs' retries, all six at once, 10 s of warm-up and a 20 s window. It
// checks what must hold whatever the controller's tuning (Result.gateway,
// Result.measure, frontend.check): no request lost or broken, the idle
// slot time and the counts of the demand outside present on /status and
// /metrics and consistent with the limiter, the SDK users' retries seen as
// returns, and with 16 users on 3 slots, refusals.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("real time, about 40 s: skipped in -short")
	}
	like := Case{Warmup: 10 * time.Second, Window: 20 * time.Second, Seed: 1}
	var cases []Case
	for _, s := range Stacks {
		cases = append(cases,
			Case{Stack: s, Mode: Mode{}, Clients: RetryAfter5s, Warmup: like.Warmup, Window: like.Window, Seed: like.Seed},
			Case{Stack: s, Mode: Mode{Cap: 3}, Clients: SDK, Warmup: like.Warmup, Window: like.Window, Seed: like.Seed})
	}
	start := time.Now()
	res, err := RunAll(t.Context(), cases, len(cases), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		c := cases[i]
		for _, p := range r.Problems {
			t.Errorf("%s: %s", c, p)
		}
		if c.Clients == SDK && (r.Refusals == 0 || r.Returned == 0) {
			t.Errorf("%s: %d refusals and %d returns in the window: 16 users on 3 slots must be refused, and the SDKs' retries come back", c, r.Refusals, r.Returned)
		}
	}
	var b strings.Builder
	_ = Table(&b, res)
	t.Logf("in %v, load average %s:\n%s", time.Since(start).Round(time.Second), bench.LoadAverage(), b.String())
}

// TestLoadFull is the full run: every stack, mode and client policy, each
// on a fresh engine, 30 s of warm-up and a 60 s window, -at-once runs at a
// time. It runs only with KNEECAP_LOADTEST=full (scripts/load-test), fails
// on any run's problem, and writes the table and the JSON.
func TestLoadFull(t *testing.T) {
	if os.Getenv("KNEECAP_LOADTEST") != "full" {
		t.Skip("the full load test runs with KNEECAP_LOADTEST=full (scripts/load-test)")
	}
	cases := Cases(Stacks, Modes, []Clients{RetryAfter5s, SDK}, Case{Warmup: *flagWarmup, Window: *flagWindow, Seed: *flagSeed})
	start, before := time.Now(), bench.LoadAverage()
	t.Logf("%d runs, %d at once, %v + %v each; load average %s", len(cases), *flagAtOnce, *flagWarmup, *flagWindow, before)
	res, err := RunAll(t.Context(), cases, *flagAtOnce, func(c Case, r Result) {
		t.Logf("%s: %.3f good req/s, %.3f served, %d refusals, cap %d, idle slots %.2f (%s)", c, r.Goodput, r.Served, r.Refusals, r.FinalCap, r.IdleSlots, r.Wall)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		for _, p := range r.Problems {
			if cases[i].Mode.Alone {
				t.Logf("%s: %s", cases[i], p) // the engine's own failures, reported in the table
				continue
			}
			t.Errorf("%s: %s", cases[i], p)
		}
	}
	var b strings.Builder
	if *flagLabel != "" {
		b.WriteString(*flagLabel + "\n\n")
	}
	fmt.Fprintf(&b, "%s, %d runs of %v warm-up + %v window, %d at once, in %v; load average %s before, %s after\n\n",
		start.Format("2006-01-02"), len(cases), *flagWarmup, *flagWindow, *flagAtOnce, time.Since(start).Round(time.Second), before, bench.LoadAverage())
	_ = Table(&b, res)
	t.Log("\n" + b.String())
	if *flagTable != "" {
		if err := os.WriteFile(*flagTable, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if *flagJSON != "" {
		if err := WriteJSON(*flagJSON, res); err != nil {
			t.Error(err)
		}
	}
}
