package scenarios

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/bench"
)

// Peers are the peer algorithms run on the same path (package
// admission/peers): each library's defaults, and the two configurations a
// careful user would pick in front of an LLM engine (see newPeer).
var Peers = []string{"envoy-gradient", "envoy-pinned", "netflix-gradient2", "netflix-aimd", "netflix-aimd-slo"}

// OraclePeers are the peers that take the oracle's count cap, run once the
// static caps of their scenario are known: vLLM's static budget of prompt
// tokens in prefill (max_num_queued_tokens, set to the TTFT target x the
// prefill throughput measured alone) beside the oracle's count cap (see
// queuedTokensPeer).
var OraclePeers = []string{"vllm-queued-tokens"}

// AllPeers are Peers and OraclePeers, in the table's order.
func AllPeers() []string { return append(append([]string(nil), Peers...), OraclePeers...) }

// Options choose what a suite runs.
type Options struct {
	// Scenarios are the IDs to run; empty means all.
	Scenarios []int
	// Caps are the static caps swept for the oracle; empty means
	// SweptCaps.
	Caps []int
	// NoPeers skips the peer algorithms.
	NoPeers bool
	// Timing of every run; zero means DefaultTiming.
	Timing Timing
	// Seed of every run (the same in every mode, so they see the same
	// requests).
	Seed uint64
	// Clients is what the closed-loop users do with a refused request
	// ("sdk", "next" or "none", see bench.ParseClients); empty means the
	// OpenAI SDKs' retries ("sdk"), the default of most users' clients.
	Clients string
	// AloneUsers are the numbers of users the engine alone is run with,
	// in the closed-loop scenarios that sweep them (Scenario.AloneSweep):
	// the best is what admission control at most achieves on a
	// homogeneous load by making the engine see exactly the right number
	// of users. Empty means DefaultAloneUsers.
	AloneUsers []int
	// AdaptiveEnv are KNEECAP_* settings (KEY=VALUE) added to the adaptive
	// gateway's in every scenario (say KNEECAP_DECODE_STEP=true), the
	// static caps and peers unchanged: a switch measured against the same
	// oracles.
	AdaptiveEnv []string
	// Progress, when set, is told about every finished run.
	Progress func(sc Scenario, res RunResult)
	// Context, when set and done, stops the suite: the runs under way
	// finish (a run in a bubble cannot be cut short) and the rest are
	// skipped, so the Suite is incomplete; the caller checks Context.Err.
	Context context.Context
}

// DefaultAloneUsers are the numbers of users the engine alone is swept
// with: every one up to 16, past the knee of every scenario's engine.
var DefaultAloneUsers = func() []int {
	k := make([]int, 16)
	for i := range k {
		k[i] = i + 1
	}
	return k
}()

func (s *Suite) aloneUsers() []int {
	if len(s.Options.AloneUsers) > 0 {
		return s.Options.AloneUsers
	}
	return DefaultAloneUsers
}

// clients is what the users of a scenario do with a refused request: the
// suite's choice for a closed loop (the OpenAI SDKs' by default); open-loop
// arrivals never retry.
func (s *Suite) clients(sc Scenario) bench.Clients {
	if sc.Users == 0 {
		return bench.ClientsNext
	}
	c, err := bench.ParseClients(s.Options.Clients)
	if err != nil || s.Options.Clients == "" {
		return bench.ClientsSDK
	}
	return c
}

// SweptCaps are the static caps the suite sweeps by default: every one up
// to 24, where every scenario's oracle lies (the largest, scenario 17's, is
// 16), then 32, 40, 48, 56 and 64, enough to show the fall beyond the knee
// (every cap above 24 served no good request in the scenarios that swept
// them all, on the sweep of 2026-12-04) at a fifth of the time the
// whole range 1..64 took. -caps 1-64 sweeps them all.
func SweptCaps() []int {
	c := make([]int, 0, 29)
	for i := 1; i <= 24; i++ {
		c = append(c, i)
	}
	return append(c, 32, 40, 48, 56, 64)
}

// AllCaps is 1..64.
func AllCaps() []int {
	c := make([]int, 64)
	for i := range c {
		c[i] = i + 1
	}
	return c
}

// Suite is the outcome of a suite: every run, by scenario and mode.
type Suite struct {
	Options Options
	// KneeCapacity is scenario 1's oracle goodput, which sets the rates of
	// the open-loop scenarios.
	KneeCapacity float64
	Runs         map[int][]RunResult
	Scenarios    []Scenario
	// MixRuns are the runs of the mixes (scenarios 14 and 15, mix.go) by
	// ID and variant.
	MixRuns map[int]map[string]RunResult
	Wall    time.Duration
}

// RunSuite runs the suite. It must be given a *testing.T because each run
// is a testing/synctest bubble, so it runs inside a test (TestScenarios);
// parallel runs use the test's -parallel setting (GOMAXPROCS by default).
// Scenarios 3, 6 and 7 need scenario 1's oracle first and run in a second
// stage.
func RunSuite(t *testing.T, opt Options) *Suite {
	start := time.Now()
	if len(opt.Caps) == 0 {
		opt.Caps = SweptCaps()
	}
	if opt.Timing == (Timing{}) {
		opt.Timing = DefaultTiming
	}
	s := &Suite{Options: opt, Runs: map[int][]RunResult{}}
	want := func(id int) bool { return len(opt.Scenarios) == 0 || slices.Contains(opt.Scenarios, id) }
	for _, sc := range All() {
		if want(sc.ID) {
			s.Scenarios = append(s.Scenarios, sc)
		}
	}
	needsKnee := func(sc Scenario) bool { return (sc.Users == 0 && sc.Trace == nil && sc.Rate == 0) || sc.RestoreOf > 0 }
	var first, second []Scenario
	for _, sc := range s.Scenarios {
		if needsKnee(sc) {
			second = append(second, sc)
		} else {
			first = append(first, sc)
		}
	}
	if len(second) > 0 && !want(1) {
		first = append([]Scenario{All()[0]}, first...)
	}
	s.runStage(t, first, 0, s.modes)
	if len(second) > 0 && !s.stopped() {
		_, s.KneeCapacity = s.oracle(1, -1)
		s.runStage(t, second, s.KneeCapacity, s.modes)
	}
	if !s.Options.NoPeers && len(s.Options.Caps) > 0 && !s.stopped() {
		// The oracle's peers, on every scenario's oracle cap.
		s.runStage(t, s.Scenarios, s.KneeCapacity, func(sc Scenario) []Mode {
			c, _ := s.oracle(sc.ID, -1)
			var m []Mode
			if sc.Lean {
				return nil
			}
			for _, p := range OraclePeers {
				m = append(m, Mode{Kind: "peer", Peer: p, Cap: max(c, 1)})
			}
			return m
		})
	}
	var mixes []Mix
	for _, m := range Mixes() {
		if want(m.ID) {
			mixes = append(mixes, m)
		}
	}
	if len(mixes) > 0 && !s.stopped() {
		s.runMixes(t, mixes)
	}
	s.Wall = time.Since(start)
	return s
}

// stopped reports whether Options.Context is done.
func (s *Suite) stopped() bool { return s.Options.Context != nil && s.Options.Context.Err() != nil }

// modes lists the runs of one scenario.
func (s *Suite) modes(sc Scenario) []Mode {
	var m []Mode
	if !sc.Lean {
		m = append(m, Mode{Kind: "engine"})
	}
	m = append(append(m, Mode{Kind: "adaptive"}), sc.traceModes()...)
	if sc.BudgetAlone && sc.Users > 0 {
		m = append(m, Mode{Kind: "budget", Cap: sc.Users})
	}
	if reconverges(sc.ID) {
		for k := 1; k < reconvergeSeeds; k++ {
			m = append(m, Mode{Kind: "adaptive", SeedOffset: uint64(k)})
		}
	}
	if sc.Users > 0 && s.clients(sc) != bench.ClientsNext && !sc.Lean {
		m = append(m, Mode{Kind: "adaptive", Clients: "next"}) // today's clients
		if _, ok := todaysBaseline[sc.ID]; ok {
			for k := 1; k < todaysSeeds; k++ {
				m = append(m, Mode{Kind: "adaptive", Clients: "next", SeedOffset: uint64(k)})
			}
		}
	}
	if sc.AloneSweep && sc.Users > 0 {
		for _, k := range s.aloneUsers() {
			m = append(m, Mode{Kind: "engine", Cap: k})
		}
	}
	caps := s.Options.Caps
	if sc.OwnCaps && len(caps) > 0 {
		caps = sc.SweptCaps
	}
	for _, c := range caps {
		if (sc.MaxSweptCap <= 0 || c <= sc.MaxSweptCap) && (len(sc.SweptCaps) == 0 || slices.Contains(sc.SweptCaps, c)) {
			m = append(m, Mode{Kind: "static", Cap: c})
		}
	}
	if !s.Options.NoPeers && !sc.NoPeers {
		for _, p := range Peers {
			m = append(m, Mode{Kind: "peer", Peer: p})
		}
	}
	return m
}

// timing is the timing of a scenario's runs: the suite's, with the
// scenario's own window when the suite runs with DefaultTiming.
func (s *Suite) timing(sc Scenario) Timing { return sc.timing(s.Options.Timing) }

// runOne runs one run as a parallel subtest, in its own bubble, and says
// whether it ran: a failed run is reported on t, and the runs of a stopped
// suite are skipped.
func (s *Suite) runOne(t *testing.T, run Run) (RunResult, bool) {
	t.Parallel()
	if s.stopped() {
		t.Skip("interrupted")
	}
	var res RunResult
	var err error
	wall := time.Now()
	synctest.Test(t, func(t *testing.T) { res, err = run.execute(t.Context()) })
	res.Wall = time.Since(wall)
	if err != nil {
		t.Errorf("scenario %d %s: %v", run.Scenario.ID, run.Mode, err)
		return res, false
	}
	return res, true
}

func (s *Suite) runStage(t *testing.T, scs []Scenario, knee float64, modes func(Scenario) []Mode) {
	var mu sync.Mutex
	t.Run(fmt.Sprintf("stage-knee-%.3f", knee), func(t *testing.T) {
		for _, sc := range scs {
			for _, m := range modes(sc) {
				run := Run{Scenario: sc, Mode: m, Timing: s.timing(sc), KneeCapacity: knee, Seed: s.Options.Seed + m.SeedOffset, Clients: s.clients(sc)}
				if m.Clients != "" {
					run.Clients, _ = bench.ParseClients(m.Clients)
				}
				if sc.RestoreOf > 0 && m.Kind == "adaptive" {
					run.State = s.savedState(sc.RestoreOf, run.Clients)
				}
				if m.Kind == "adaptive" {
					run.Env = append(run.Env, s.Options.AdaptiveEnv...)
				}
				run.SaveState = m.Kind == "adaptive" && restored(sc.ID)
				t.Run(fmt.Sprintf("%d-%s/%s", sc.ID, sc.Name, m), func(t *testing.T) {
					res, ok := s.runOne(t, run)
					if !ok {
						return
					}
					mu.Lock()
					s.Runs[sc.ID] = append(s.Runs[sc.ID], res)
					mu.Unlock()
					if s.Options.Progress != nil {
						s.Options.Progress(sc, res)
					}
				})
			}
		}
	})
}

// oracle returns the best static cap of a scenario and its goodput, over
// the whole window (half < 0) or one half (0 or 1). Ties go to the smaller
// cap. With pow2 only caps that are powers of two count.
func (s *Suite) best(id, half int, pow2 bool) (int, float64) {
	bestCap, bestG := 0, -1.0
	for _, r := range s.Runs[id] {
		if r.Mode != "static" || (pow2 && r.Cap&(r.Cap-1) != 0) {
			continue
		}
		g := r.Goodput
		if half >= 0 {
			g = r.Halves[half]
		}
		if g > bestG || (g == bestG && r.Cap < bestCap) {
			bestCap, bestG = r.Cap, g
		}
	}
	return bestCap, max(bestG, 0)
}

func (s *Suite) oracle(id, half int) (int, float64) { return s.best(id, half, false) }

// savedState is the state file the adaptive run of a scenario with the
// given clients wrote at its end (nil: none, a cold start).
func (s *Suite) savedState(id int, clients bench.Clients) []byte {
	for _, r := range s.Runs[id] {
		if strings.HasPrefix(r.Mode, "adaptive") && r.Clients == clients.String() {
			return r.State
		}
	}
	return nil
}

// restored reports whether another scenario starts from the state of
// scenario id's adaptive runs.
func restored(id int) bool {
	for _, sc := range All() {
		if sc.RestoreOf == id {
			return true
		}
	}
	return false
}

// static returns the run of a scenario with static cap c.
func (s *Suite) static(id, c int) (RunResult, bool) {
	for _, r := range s.Runs[id] {
		if r.Mode == "static" && r.Cap == c {
			return r, true
		}
	}
	return RunResult{}, false
}

// find returns the run of a scenario in one mode ("engine", "adaptive", a
// peer's name).
func (s *Suite) find(id int, mode string) (RunResult, bool) {
	for _, r := range s.Runs[id] {
		if r.Mode == mode && (mode != "engine" || r.Cap == 0) {
			return r, true
		}
	}
	return RunResult{}, false
}

// bestAlone returns the number of users the engine alone served best and
// its goodput (0, 0 when none was swept). Ties go to fewer users.
func (s *Suite) bestAlone(id int) (int, float64) {
	bestK, bestG := 0, 0.0
	for _, r := range s.Runs[id] {
		if r.Mode != "engine" || r.Cap == 0 {
			continue
		}
		if bestK == 0 || r.Goodput > bestG || (r.Goodput == bestG && r.Cap < bestK) {
			bestK, bestG = r.Cap, r.Goodput
		}
	}
	return bestK, bestG
}

// parallelism is how many runs go at once by default.
func parallelism() int { return runtime.GOMAXPROCS(0) }

// RunRealTime runs one scenario in real time over TCP on 127.0.0.1, in the
// modes given, all at once (each has its own engine, gateway and users; the
// machine needs a core's worth of time for each). Open-loop rates resolve
// against knee (requests/s). It takes Warmup + Window of wall time.
func RunRealTime(ctx context.Context, sc Scenario, modes []Mode, timing Timing, knee float64, seed uint64) ([]RunResult, error) {
	res := make([]RunResult, len(modes))
	errs := make([]error, len(modes))
	var wg sync.WaitGroup
	for i, m := range modes {
		wg.Go(func() {
			start := time.Now()
			run := Run{Scenario: sc, Mode: m, Timing: sc.timing(timing), KneeCapacity: knee, Seed: seed, RealTime: true}
			res[i], errs[i] = run.execute(ctx)
			res[i].Wall = time.Since(start)
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}
