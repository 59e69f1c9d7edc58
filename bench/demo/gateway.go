package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/kneecap/kneecap/admission/adaptive"
	"github.com/kneecap/kneecap/bench"
	kgw "github.com/kneecap/kneecap/gateway"
)

// gateway is the kneecap gateway as the demo runs it: run serves it on its
// listeners until ctx ends, then drains.
type gateway struct {
	run      func(ctx context.Context) error
	describe string
}

// controller is how the demo's gateway decides how many requests run on
// the engine at once.
type controller struct {
	// Cap is a static cap, used when New is nil.
	Cap int
	// New builds a controller that sets the cap itself (the adaptive one);
	// nil means the static Cap.
	New kgw.ControllerFunc
	// Why says where the choice came from, for the demo's output.
	Why string
}

// chooseController is the one place where the demo picks the gateway's
// admission controller: the best the gateway has, which is the adaptive
// controller with its defaults (KNEECAP_SLO_PERCENTILE 0.9, MIN_CAP 1,
// MAX_CAP 512), no tuning; the engine-alone run does not inform it. The
// static alternative, kept for comparison, is staticAtKnee.
func chooseController(bench.Report) (controller, error) {
	cfg, err := adaptive.ConfigFromEnv(nil) // nothing set: the defaults
	if err != nil {
		return controller{}, err
	}
	return controller{New: adaptive.New(cfg), Why: "adaptive cap with its defaults, no tuning"}, nil
}

// staticAtKnee is a static cap where the engine-alone run measured the
// highest goodput: what an operator would set after running kneecap bench.
func staticAtKnee(alone bench.Report) controller {
	k := alone.Knee()
	if k.Best < 0 {
		return controller{Cap: 1, Why: "static cap 1 (no level of the engine-alone run had a good request)"}
	}
	c := int(alone.Levels[k.Best].Value)
	return controller{Cap: c, Why: fmt.Sprintf("static cap %d, the knee the engine-alone run measured", c)}
}

// newGateway builds kneecap's gateway in front of upstream, serving on
// traffic (and an admin listener of its own on 127.0.0.1) with the given
// targets (in wall time) and controller.
func newGateway(upstream string, traffic net.Listener, targets bench.Targets, ctl controller, log *slog.Logger) (*gateway, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg := kgw.Config{
		Upstream: u, Listen: traffic.Addr().String(), AdminListen: admin.Addr().String(),
		SLOTTFT: targets.TTFT, SLOTPOT: targets.TPOT, SLOE2E: targets.E2E,
		SLOWindow: 60 * time.Second, MaxConcurrency: ctl.Cap, MaxQueue: 1024,
		FirstTokenTimeout: 60 * time.Second, MaxBodyBytes: 16 << 20, DrainTimeout: 5 * time.Second,
		UpstreamHealthPath: "/health", LogFormat: "text",
	}
	opts := []kgw.Option{kgw.WithListeners(traffic, admin), kgw.WithLogger(log)}
	if ctl.New != nil {
		cfg.MaxConcurrency = 0
		opts = append(opts, kgw.WithController(ctl.New))
	}
	g, err := kgw.New(cfg, opts...)
	if err != nil {
		admin.Close()
		return nil, err
	}
	return &gateway{run: g.Run, describe: ctl.Why}, nil
}
