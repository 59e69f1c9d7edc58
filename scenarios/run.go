package scenarios

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/sim"
)

// Mode is how the engine is fronted in one run.
type Mode struct {
	// Kind is "engine" (no gateway; with Cap set, Cap users in place of
	// the scenario's: the engine alone with the number of users it serves
	// best at, found by sweeping Cap), "static" (the gateway with a static
	// cap Cap), "adaptive" (the gateway with its defaults) or "peer" (the
	// gateway's limiter driven by the peer algorithm Peer), or "budget"
	// (the gateway with a static cap Cap and its defaults: the token
	// budget on, which the static caps run without).
	Kind string
	Cap  int
	Peer string
	// Clients, when set, is what the closed-loop users of this run do
	// with a refused request in place of the suite's (bench.ParseClients):
	// the adaptive gateway with today's clients beside the SDKs'.
	Clients string
	// Env, when set, is one KNEECAP_* setting of the gateway beyond the
	// run's (traces.go: an adaptive gateway without cached-token cost).
	Env string
	// SeedOffset, when set, runs it on the suite's seed plus this: the
	// adaptive gateway with today's clients on further seeds (todaysSeeds),
	// or with the scenario's own where it re-converges (reconvergeSeeds).
	SeedOffset uint64
}

func (m Mode) String() string {
	switch m.Kind {
	case "static":
		return fmt.Sprintf("static-%d", m.Cap)
	case "budget":
		return fmt.Sprintf("budget-%d", m.Cap)
	case "peer":
		return m.Peer
	case "engine":
		if m.Cap > 0 {
			return fmt.Sprintf("engine-%d", m.Cap)
		}
	case "adaptive":
		if m.SeedOffset > 0 && m.Clients == "" && m.Env == "" {
			return fmt.Sprintf("adaptive+%d", m.SeedOffset)
		}
		if m.SeedOffset > 0 {
			return fmt.Sprintf("adaptive-%s%s+%d", m.Clients, m.Env, m.SeedOffset)
		}
		if m.Clients != "" || m.Env != "" {
			return "adaptive-" + m.Clients + m.Env
		}
	}
	return m.Kind
}

// Run is one run's setting.
type Run struct {
	Scenario Scenario
	Mode     Mode
	Timing   Timing
	// KneeCapacity resolves open-loop rates (requests/s).
	KneeCapacity float64
	// Seed makes the run repeatable.
	Seed uint64
	// RealTime runs over TCP on 127.0.0.1 in real time instead of over
	// net.Pipe in a synctest bubble.
	RealTime bool
	// Env adds KNEECAP_* settings to the gateway's (classes, tenants);
	// Workload, when set, replaces the scenario's (per-user classes and
	// headers). See mix.go.
	Env      []string
	Workload bench.Workload
	// KeepRecords keeps the window's records in the result (TestTrace).
	KeepRecords bool
	// Clients is what the closed-loop users do with a refused request
	// (bench.Clients; see Scenario.clients).
	Clients bench.Clients
	// StateCap, when positive, is the cap of the state file an adaptive
	// gateway starts from (TestTrace); State, when set, is the state
	// file itself, as another run saved it (see Scenario.RestoreOf).
	StateCap int
	State    []byte
	// SaveState has an adaptive gateway keep a state file, and the run
	// return it (RunResult.State).
	SaveState bool
}

// debugLog, when set by a test, receives the gateway's log (one line per
// change of the cap).
var debugLog *slog.Logger

// RetryAfterMax bounds how long a closed-loop user honours Retry-After.
const RetryAfterMax = 30 * time.Second

// eventSpacing keeps events of a virtual-time run apart, so that a run is
// exactly repeatable: goroutines woken at one instant of a synctest bubble
// run in no fixed order, and the order would decide which request gets a
// freed slot or which observation the controller sums first. The simulator
// delivers the outputs of one step eventSpacing apart in batch order, a
// closed-loop user waits a tenth of it after a completed request (so the
// gateway has released the slot by then), and users start eventSpacing
// apart, and a refused user returns a quarter of it after its Retry-After.
// A microsecond is far below anything the runs measure.
const eventSpacing = time.Microsecond

// execute runs r in the calling goroutine's time (inside a synctest bubble
// this is virtual time) and returns its result. Everything it starts ends
// before it returns.
func (r Run) execute(ctx context.Context) (RunResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	replay, err := r.Scenario.Trace.replay(r.Timing)
	if err != nil {
		return RunResult{}, err
	}
	quiet := slog.New(slog.DiscardHandler)
	if debugLog != nil {
		quiet = debugLog
	}

	scfg := sim.Config{Profile: r.Scenario.Profile, Flavor: r.Scenario.Flavor, Seed: r.Seed, Registry: prometheus.NewRegistry(), Logger: quiet}
	if !r.RealTime {
		scfg.Stagger = eventSpacing
	}
	eng, err := sim.New(scfg)
	if err != nil {
		return RunResult{}, err
	}
	var stateDir string // removed after every goroutine of the run ended
	defer func() {
		if stateDir != "" {
			os.RemoveAll(stateDir)
		}
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	engE, err := newEndpoint("engine", r.RealTime)
	if err != nil {
		return RunResult{}, err
	}
	engSrv := &http.Server{Handler: eng.Handler(), ErrorLog: nil}
	wg.Go(func() { _ = engSrv.Serve(engE.ln) })
	wg.Go(func() { _ = eng.Run(ctx) })
	defer engSrv.Close()

	front := engE
	var traj *trajectory
	var fe *frontend
	gwCtx, stopGateway := context.WithCancel(context.Background())
	defer stopGateway()
	if r.Mode.Kind != "engine" {
		gwE, err := newEndpoint("gateway", r.RealTime)
		if err != nil {
			return RunResult{}, err
		}
		adminE, err := newEndpoint("admin", r.RealTime)
		if err != nil {
			return RunResult{}, err
		}
		if (r.StateCap > 0 || r.State != nil || r.SaveState) && r.Mode.Kind == "adaptive" {
			path, err := writeState(r, engE)
			if err != nil {
				return RunResult{}, err
			}
			stateDir = filepath.Dir(path)
			r.Env = append(slices.Clip(r.Env), "KNEECAP_STATE_FILE="+path)
		}
		if r.Mode.Env != "" {
			r.Env = append(slices.Clip(r.Env), r.Mode.Env)
		}
		fe, err = newFrontend(r, engE, gwE.ln, adminE.ln, quiet)
		if err != nil {
			return RunResult{}, err
		}
		traj = fe.traj
		// The gateway stops (and drains) before the engine does. In virtual
		// time it starts half an eventSpacing late, so that its controller
		// decides at whole seconds plus that, never at the instant of a
		// whole-second event of the users (a burst's first arrival, a
		// Retry-After).
		wg.Go(func() {
			if !r.RealTime {
				time.Sleep(eventSpacing / 2)
			}
			_ = fe.gw.Run(gwCtx)
		})
		front = gwE
	}

	start := time.Now()
	// The gateway's count of the demand it turned away and the slot time
	// it left idle, at the window's start and end.
	var outside *windowCount
	if fe != nil {
		outside = countWindow(fe.gw.Limiter(), r.Timing.Warmup, r.Timing.Window)
		defer outside.stop()
	}
	if r.Scenario.StepFactor > 0 {
		at, back := r.Scenario.changes(r.Timing)
		t := time.AfterFunc(at, func() { eng.SetStepFactor(r.Scenario.StepFactor) })
		defer t.Stop()
		if back > 0 {
			t := time.AfterFunc(back, func() { eng.SetStepFactor(1) })
			defer t.Stop()
		}
	}
	tr := front.tr
	defer tr.CloseIdleConnections()
	users := r.Scenario.Users + r.Scenario.FloodUsers
	if r.Mode.Kind == "engine" && r.Mode.Cap > 0 {
		users = r.Mode.Cap
	}
	cfg := bench.Config{
		Clients:       r.Clients,
		BaseURL:       "http://" + front.host,
		Model:         r.Scenario.Profile.Model,
		Client:        &http.Client{Transport: tr},
		Levels:        []float64{float64(users)},
		Warmup:        r.Timing.Warmup,
		Duration:      r.Timing.Window,
		Workload:      r.workload(),
		Seed:          r.Seed,
		IgnoreEOS:     true,
		Targets:       r.Scenario.Targets(),
		RetryAfterMax: RetryAfterMax,
	}
	if !r.RealTime {
		// No two users act at one instant (see eventSpacing).
		cfg.RampUp = time.Duration(users) * eventSpacing
		cfg.Think = eventSpacing / 10
		// A refused user returns off the limiter's pace timer, which
		// fires a TTFT target (whole seconds) after a grant at the
		// instant of the refusal.
		cfg.RetryThink = eventSpacing / 4
	}
	if r.Scenario.Users == 0 {
		cfg.Mode = bench.Open
		cfg.Levels = []float64{r.Scenario.rate(r.KneeCapacity)}
		cfg.Interarrival = r.Scenario.interarrival()
	}
	replay(&cfg)
	rep, err := bench.Run(ctx, cfg)
	if err != nil && !errors.Is(err, bench.ErrTimeout) {
		return RunResult{}, err
	}
	if len(rep.Levels) == 0 {
		return RunResult{}, errors.New("bench ran no level")
	}
	res := r.result(rep.Levels[0], start, traj)
	if outside != nil {
		res.Outside = outside.result()
	}
	if r.SaveState && fe != nil {
		if res.State, err = saveState(fe.gw, r.Env); err != nil {
			return RunResult{}, err
		}
	}
	stopGateway()
	cancel()
	return res, nil
}

// result computes a run's numbers from the bench records.
func (r Run) result(lv bench.Level, start time.Time, traj *trajectory) RunResult {
	// Mode is the kind but for a peer (its name) and the adaptive gateway
	// with other clients (adaptive-next).
	res := RunResult{Mode: r.Mode.Kind, Cap: r.Mode.Cap, Clients: r.Clients.String(), Converge: -1, Reconverge: -1}
	if r.Mode.Kind == "peer" || r.Mode.Kind == "adaptive" || r.Mode.Kind == "budget" {
		res.Mode = r.Mode.String()
	}
	from, to := lv.WindowStart, lv.WindowEnd
	mid := start.Add(r.Timing.ChangeAt())
	var ttfts, e2es []time.Duration
	count := func(recs []bench.Record) (good int) {
		for _, rec := range recs {
			if rec.Good {
				good++
			}
		}
		return good
	}
	for _, rec := range bench.Slice(lv.Records, from, to) {
		res.countClass(rec, to.Sub(from))
		switch rec.Outcome {
		case bench.Completed:
			res.Completed++
			ttfts = append(ttfts, rec.TTFT)
			e2es = append(e2es, rec.End.Sub(rec.Due))
			if rec.Good {
				res.Good++
			}
		case bench.Rejected:
			res.Rejected++
		default:
			res.Errors++
		}
		if rec.GaveUp {
			res.Failed++
		}
	}
	res.MedianTTFT, res.MedianE2E = median(ttfts), median(e2es)
	if r.KeepRecords {
		res.Records = bench.Slice(lv.Records, from, to)
	}
	if r.Scenario.ColdStart {
		for _, rec := range lv.Records {
			if rec.Good {
				res.GoodAt = append(res.GoodAt, rec.End.Sub(start))
			}
		}
		slices.Sort(res.GoodAt)
	}
	if d := to.Sub(from).Seconds(); d > 0 {
		res.Goodput = float64(res.Good) / d
	}
	if d := mid.Sub(from).Seconds(); d > 0 {
		res.Halves[0] = float64(count(bench.Slice(lv.Records, from, mid))) / d
	}
	if d := to.Sub(mid).Seconds(); d > 0 {
		res.Halves[1] = float64(count(bench.Slice(lv.Records, mid, to))) / d
	}
	if at, back := r.Scenario.changes(r.Timing); r.Scenario.Recovers {
		bounds := []time.Time{from, start.Add(at), start.Add(back), to}
		for i := range res.Thirds {
			if d := bounds[i+1].Sub(bounds[i]).Seconds(); d > 0 {
				res.Thirds[i] = float64(count(bench.Slice(lv.Records, bounds[i], bounds[i+1]))) / d
			}
		}
	}
	if traj != nil {
		end := to.Sub(start)
		// A change at the window's last instant races with the end of the
		// run; only what happened inside the window counts.
		for _, p := range traj.points() {
			if p.At < end {
				res.Caps = append(res.Caps, p)
			}
		}
		res.FinalCap, res.Converge = convergence(res.Caps, 0, end)
		res.HeldCap = heldCap(res.Caps, from.Sub(start), end)
		if r.Scenario.HasChange() {
			at, _ := r.Scenario.changes(r.Timing)
			_, res.Reconverge = convergence(res.Caps, at, end)
		}
	}
	return res
}

// trajectory records a limit's changes over time.
type trajectory struct {
	mu    sync.Mutex
	start time.Time
	caps  []CapPoint
}

func newTrajectory(start time.Time, initial int) *trajectory {
	return &trajectory{start: start, caps: []CapPoint{{0, initial}}}
}

func (t *trajectory) add(now time.Time, c int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.caps); n > 0 && t.caps[n-1].Cap == c {
		return
	}
	t.caps = append(t.caps, CapPoint{now.Sub(t.start), c})
}

func (t *trajectory) points() []CapPoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]CapPoint(nil), t.caps...)
}
