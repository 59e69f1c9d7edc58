package scenarios

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kneecap/kneecap/bench"
)

// The flags of TestScenarios, given to the test binary after -args:
//
//	go test -v -count=1 -timeout 0 -run TestScenarios ./scenarios/ -args -scenarios 1,3 -caps 1-8 -no-peers -seed 2
//
// Without them TestScenarios runs the issue's sweep as CI does.
var (
	flagScenarios = flag.String("scenarios", os.Getenv("KNEECAP_SCENARIOS"), "comma-separated scenario IDs to run (default all; also KNEECAP_SCENARIOS)")
	flagCaps      = flag.String("caps", "1-24,32,40,48,56,64", "static caps swept for the oracle: ranges A-B and caps, comma-separated (1-64 for every one)")
	flagNoPeers   = flag.Bool("no-peers", false, "skip the peer algorithms (Envoy gradient and pinned gradient, Netflix Gradient2, AIMD and AIMD on missed targets)")
	flagSeed      = flag.Uint64("seed", 1, "seed of every run")
	flagWarmup    = flag.Duration("warmup", DefaultTiming.Warmup, "simulated warm-up of every run, not measured")
	flagWindow    = flag.Duration("window", DefaultTiming.Window, "simulated measured window of every run")
	flagJSON      = flag.String("json-out", "", "write the table as JSON to this file (a relative path is relative to scenarios/, where go test runs)")
	flagRealTime  = flag.Bool("real-time", false, "run the scenarios in real time over TCP on 127.0.0.1 instead, in the modes engine, adaptive and the -caps given (at most 8; takes -warmup + -window of wall time)")
	flagKnee      = flag.Float64("knee", 0.75, "with -real-time: the knee capacity in req/s that sets the open-loop rates")
	flagClients   = flag.String("clients", "sdk", "what closed-loop users do with a refused request: sdk (retry it as the OpenAI SDKs do: 2 retries, Retry-After up to 60 s, else backoff), next (drop it, wait Retry-After up to 30 s, send the next, forever), none (give up at once, as vLLM's benchmark)")
	flagAdaptEnv  = flag.String("adaptive-env", "", "KNEECAP_* settings added to the adaptive gateway's, KEY=VALUE comma-separated (say KNEECAP_DECODE_STEP=true); the static caps and peers run as without; not the issue's sweep")
	flagAlone     = flag.String("alone-users", "1-16", "numbers of users the engine alone is run with, in the scenarios that sweep them: a range A-B or a list")
)

// flagOptions returns the suite's Options from the flags, and whether they
// are the issue's sweep (every cap 1..64 and the peers, seed 1, the default
// timing; any subset of scenarios), the one its thresholds are set for.
func flagOptions() (opt Options, issueSweep bool, err error) {
	opt = Options{NoPeers: *flagNoPeers, Seed: *flagSeed, Timing: Timing{Warmup: *flagWarmup, Window: *flagWindow}, Clients: *flagClients}
	if _, err := bench.ParseClients(*flagClients); err != nil {
		return opt, false, fmt.Errorf("-clients: %v", err)
	}
	if *flagAdaptEnv != "" {
		for _, kv := range strings.Split(*flagAdaptEnv, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || !strings.HasPrefix(k, "KNEECAP_") {
				return opt, false, fmt.Errorf("-adaptive-env: %q is not KNEECAP_NAME=value", kv)
			}
			opt.AdaptiveEnv = append(opt.AdaptiveEnv, kv)
		}
	}
	if opt.AloneUsers, err = parseCaps(*flagAlone); err != nil {
		return opt, false, fmt.Errorf("-alone-users: %v", err)
	}
	if opt.Scenarios, err = parseInts(*flagScenarios); err != nil {
		return opt, false, fmt.Errorf("-scenarios: %v", err)
	}
	for _, id := range opt.Scenarios {
		if _, ok := ByID(id); !ok && !slices.Contains(mixIDs(), id) {
			return opt, false, fmt.Errorf("-scenarios: no scenario %d (there are %v and %v)", id, scenarioIDs(), mixIDs())
		}
	}
	if opt.Caps, err = parseCaps(*flagCaps); err != nil {
		return opt, false, fmt.Errorf("-caps: %v", err)
	}
	if opt.Timing.Window <= 0 || opt.Timing.Warmup < 0 {
		return opt, false, fmt.Errorf("-window must be positive and -warmup not negative")
	}
	issueSweep = (slices.Equal(opt.Caps, SweptCaps()) || slices.Equal(opt.Caps, AllCaps())) && !opt.NoPeers && opt.Seed == 1 && opt.Timing == DefaultTiming && *flagClients == "sdk" && len(opt.AdaptiveEnv) == 0
	return opt, issueSweep, nil
}

// scenarioIDs are the IDs of All.
func scenarioIDs() []int {
	var ids []int
	for _, sc := range All() {
		ids = append(ids, sc.ID)
	}
	return ids
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
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, b, ok := strings.Cut(part, "-")
		if !ok {
			a, b = part, part
		}
		lo, err1 := strconv.Atoi(a)
		hi, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || lo < 1 || hi < lo {
			return nil, fmt.Errorf("%q is not a cap or a range A-B with 1 <= A <= B", part)
		}
		for c := lo; c <= hi; c++ {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no caps")
	}
	slices.Sort(out)
	return out, nil
}

// interruptible returns a context that the first Ctrl-C (or SIGTERM)
// cancels, saying so on stderr. A second signal then ends the process at
// once, as without the handler. The handler goes with the test.
func interruptible(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case s := <-sig:
			signal.Stop(sig)
			fmt.Fprintf(os.Stderr, "\n%v: stopping; the runs under way finish first (again to stop at once)\n", s)
			cancel()
		case <-done:
		}
	}()
	t.Cleanup(func() {
		signal.Stop(sig)
		close(done)
		<-exited
		cancel()
	})
	return ctx
}

func TestParseCaps(t *testing.T) {
	for in, want := range map[string][]int{"1-3": {1, 2, 3}, "4": {4}, "2,8, 16": {2, 8, 16}, "1-3,8,2": {1, 2, 3, 8}} {
		if got, err := parseCaps(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCaps(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0-4", "5-2", "a-b", "1,x", ",", "1-x"} {
		if got, err := parseCaps(in); err == nil {
			t.Errorf("parseCaps(%q) = %v, want an error", in, got)
		}
	}
}

// Without flags TestScenarios runs the issue's sweep, the one CI checks.
func TestDefaultFlagsAreTheIssueSweep(t *testing.T) {
	if *flagScenarios != "" || *flagCaps != "1-24,32,40,48,56,64" || *flagNoPeers || *flagSeed != 1 || *flagWarmup != DefaultTiming.Warmup || *flagWindow != DefaultTiming.Window {
		t.Skip("flags given")
	}
	opt, issue, err := flagOptions()
	if err != nil || !issue || len(opt.Scenarios) != 0 {
		t.Fatalf("default flags: %+v, issue sweep %v, %v", opt, issue, err)
	}
}

// -adaptive-env adds KNEECAP_* settings to the adaptive gateway's; such a
// run is not the issue's sweep, and anything but KNEECAP_NAME=value is an
// error naming the flag.
func TestAdaptiveEnvFlag(t *testing.T) {
	old := *flagAdaptEnv
	t.Cleanup(func() { *flagAdaptEnv = old })
	*flagAdaptEnv = "KNEECAP_DECODE_STEP=true,KNEECAP_MIN_CAP=2"
	opt, issue, err := flagOptions()
	if err != nil || issue || !slices.Equal(opt.AdaptiveEnv, []string{"KNEECAP_DECODE_STEP=true", "KNEECAP_MIN_CAP=2"}) {
		t.Fatalf("got %v (issue sweep %v), %v", opt.AdaptiveEnv, issue, err)
	}
	for _, bad := range []string{"DECODE_STEP=true", "KNEECAP_DECODE_STEP", "KNEECAP_MIN_CAP=2,"} {
		*flagAdaptEnv = bad
		if _, _, err := flagOptions(); err == nil || !strings.Contains(err.Error(), "-adaptive-env") {
			t.Errorf("-adaptive-env %q: %v, want an error naming the flag", bad, err)
		}
	}
}
