package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/kneecap/kneecap/bench"
	kgw "github.com/kneecap/kneecap/gateway"
)

// gateway is the kneecap gateway as the demo runs it: run serves it on its
// listeners until ctx ends, then drains.
type gateway struct {
	run      func(ctx context.Context) error
	describe string
	// page is the URL of the gateway's live page, on its admin listener.
	page string
}

// controller is how the demo's gateway decides how many requests run on
// the engine at once.
type controller struct {
	// Cap is the gateway's KNEECAP_MAX_CONCURRENCY: a static cap, or 0 for
	// the gateway's adaptive controller.
	Cap int
	// Why says where the choice came from, for the demo's output.
	Why string
}

// chooseController is the one place where the demo picks the gateway's
// admission controller: the best the gateway has, which is the adaptive
// controller with its defaults (KNEECAP_SLO_PERCENTILE 0.9, MIN_CAP 1,
// MAX_CAP 512), no tuning; the engine-alone run does not inform it. The
// static alternative, kept for comparison, is staticAtKnee.
func chooseController(bench.Report) (controller, error) {
	return controller{Cap: 0, Why: "adaptive cap with its defaults, no tuning"}, nil
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
	// Start from the gateway's own defaults, as `kneecap serve` would read
	// them with nothing set, and change only what the demo decides.
	cfg, err := kgw.ConfigFromEnv([]string{kgw.EnvPrefix + "UPSTREAM=" + u.String()})
	if err != nil {
		admin.Close()
		return nil, err
	}
	cfg.Listen, cfg.AdminListen = traffic.Addr().String(), admin.Addr().String()
	cfg.SLOTTFT, cfg.SLOTPOT, cfg.SLOE2E = targets.TTFT, targets.TPOT, targets.E2E
	cfg.MaxConcurrency = ctl.Cap
	cfg.DrainTimeout = 5 * time.Second
	g, err := kgw.New(cfg, kgw.WithListeners(traffic, admin), kgw.WithLogger(log))
	if err != nil {
		admin.Close()
		return nil, err
	}
	return &gateway{run: g.Run, describe: ctl.Why, page: "http://" + admin.Addr().String() + "/"}, nil
}
