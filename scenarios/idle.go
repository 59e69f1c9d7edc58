package scenarios

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/bench"
	"github.com/kneecap/kneecap/sim"
)

// IdleBurst is scenario 21 (issue 23): closed-loop users at steady load,
// then an idle minute with no request at all, then the same users again at
// once, on the same gateway. A replica of a fleet sees this whenever the
// balancer or the autoscaler leaves it alone for a while. What it judges:
// the cap of the idle replica stays where it was learned, and the first
// 30 s of the burst serve as well as the steady load did.
type IdleBurst struct {
	ID       int
	Name     string
	Profile  sim.Profile
	Workload sim.Workload
	Users    int
	// Steady, Idle and Burst are the phases' lengths (simulated time).
	Steady, Idle, Burst time.Duration
	// Span is the length of the burst's first span that is judged (30 s),
	// and of the spans the steady load is measured over.
	Span time.Duration
}

// Scenario21 is the case: scenario 1's engine, workload and 64
// users, five minutes of steady load, an idle minute, a two-minute burst.
var Scenario21 = IdleBurst{
	ID: 21, Name: "idle-then-burst", Profile: sim.GB10BF16, Workload: sim.SecondWorkload,
	Users: 64, Steady: 5 * time.Minute, Idle: time.Minute, Burst: 2 * time.Minute, Span: 30 * time.Second,
}

// IdleBurstShare is the threshold: the first span of the burst serves at
// least this share of the steady goodput.
const IdleBurstShare = 0.9

// IdleResult is one run of an IdleBurst.
type IdleResult struct {
	Mode string
	Cap  int
	// Steady is the goodput of the requests sent over the steady phase's
	// last three minutes but its last 30 s (those may not end inside the
	// phase); Burst the goodput of the requests sent in the burst's first
	// Span. Goodput by the time a request was sent, not the time it ended:
	// in a closed loop the first answers of a burst end an E2E (about 10 s)
	// after it starts, so a span by end times would read low however well
	// the gateway did.
	Steady, Burst float64
	// Caps: before the idle minute, at its end, and the highest in the
	// burst's first Span.
	CapBefore, CapIdle, CapPeak int
	Trajectory                  []CapPoint
}

// OK reports whether the run meets the threshold.
func (r IdleResult) OK() bool { return r.Burst >= IdleBurstShare*r.Steady }

func (r IdleResult) String() string {
	mode := r.Mode
	if r.Mode == "static" {
		mode = fmt.Sprintf("static-%d", r.Cap)
	}
	return fmt.Sprintf("%-10s steady %.3f req/s, burst's first 30 s %.3f (%.2f of steady); cap %d before the idle minute, %d after it, at most %d in the burst",
		mode, r.Steady, r.Burst, r.Burst/r.Steady, r.CapBefore, r.CapIdle, r.CapPeak)
}

// Run runs the scenario in one mode ("adaptive", or "static" with Cap) in
// the calling goroutine's time: inside a synctest bubble, virtual time.
func (s IdleBurst) Run(ctx context.Context, mode Mode, seed uint64) (IdleResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	if debugLog != nil {
		quiet = debugLog
	}
	sc := Scenario{ID: s.ID, Name: s.Name, Profile: s.Profile, Workload: s.Workload, Users: s.Users}
	r := Run{Scenario: sc, Mode: mode, Timing: Timing{Window: s.Steady}, Seed: seed}
	eng, err := sim.New(sim.Config{Profile: s.Profile, Seed: seed, Registry: prometheus.NewRegistry(), Logger: quiet, Stagger: eventSpacing})
	if err != nil {
		return IdleResult{}, err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	engE, err := newEndpoint("engine", false)
	if err != nil {
		return IdleResult{}, err
	}
	engSrv := &http.Server{Handler: eng.Handler()}
	wg.Go(func() { _ = engSrv.Serve(engE.ln) })
	wg.Go(func() { _ = eng.Run(ctx) })
	defer engSrv.Close()
	gwE, _ := newEndpoint("gateway", false)
	adminE, _ := newEndpoint("admin", false)
	fe, err := newFrontend(r, engE, gwE.ln, adminE.ln, quiet)
	if err != nil {
		return IdleResult{}, err
	}
	gwCtx, stopGateway := context.WithCancel(context.Background())
	defer stopGateway()
	wg.Go(func() {
		time.Sleep(eventSpacing / 2) // see execute
		_ = fe.gw.Run(gwCtx)
	})
	defer gwE.tr.CloseIdleConnections()

	start := time.Now()
	phase := func(d time.Duration, seed uint64) (bench.Level, error) {
		cfg := bench.Config{
			BaseURL: "http://" + gwE.host, Model: s.Profile.Model, Client: &http.Client{Transport: gwE.tr},
			Levels: []float64{float64(s.Users)}, Duration: d, Workload: r.workload(), Seed: seed,
			IgnoreEOS: true, Targets: sc.Targets(), RetryAfterMax: RetryAfterMax,
			RampUp: time.Duration(s.Users) * eventSpacing, Think: eventSpacing / 10, RetryThink: eventSpacing / 4,
		}
		rep, err := bench.Run(ctx, cfg)
		if err != nil {
			return bench.Level{}, err
		}
		return rep.Levels[0], nil
	}
	steady, err := phase(s.Steady, seed)
	if err != nil {
		return IdleResult{}, err
	}
	res := IdleResult{Mode: mode.Kind, Cap: mode.Cap, CapBefore: fe.gw.Limiter().Limit()}
	time.Sleep(s.Idle)
	res.CapIdle = fe.gw.Limiter().Limit()
	burstAt := time.Now()
	burst, err := phase(s.Burst, seed+1000)
	if err != nil {
		return IdleResult{}, err
	}
	end := steady.Start.Add(s.Steady)
	res.Steady = sentGoodput(steady.Records, end.Add(-3*time.Minute-s.Span), end.Add(-s.Span))
	res.Burst = sentGoodput(burst.Records, burst.Start, burst.Start.Add(s.Span))
	res.Trajectory = fe.traj.points()
	res.CapPeak = res.CapIdle
	for _, p := range res.Trajectory {
		if at := start.Add(p.At); !at.Before(burstAt) && at.Before(burstAt.Add(s.Span)) {
			res.CapPeak = max(res.CapPeak, p.Cap)
		}
	}
	stopGateway()
	cancel()
	return res, nil
}

// sentGoodput is the good requests among those sent in [from, to), per
// second.
func sentGoodput(recs []bench.Record, from, to time.Time) float64 {
	good := 0
	for _, rec := range recs {
		if rec.Good && !rec.Sent.Before(from) && rec.Sent.Before(to) {
			good++
		}
	}
	return float64(good) / to.Sub(from).Seconds()
}
