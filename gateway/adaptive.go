package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/admission/control"
	"github.com/kneecap/kneecap/learnt"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
)

// adaptive is the gateway's own controller: a control.Loop driving the
// gateway's limiter, fed with the proxy's observations. With
// Config.MaxConcurrency unset it sets the cap; with it set the cap stays
// where the operator put it, and the loop still learns the latency model,
// refuses at once a request predicted to miss its TTFT target in the queue
// (reason "deadline"), paces prefills and computes Retry-After.
type adaptive struct {
	*control.Loop
	lim *admission.Limiter
}

var (
	_ CapControl           = (*adaptive)(nil)
	_ StatusReporter       = (*adaptive)(nil)
	_ proxy.ChunksObserver = (*adaptive)(nil)
	_ admission.Gate       = (*adaptive)(nil)
	_ admission.Refuser    = (*adaptive)(nil)
)

// newAdaptive builds the gateway's controller from its configuration:
// the targets, KNEECAP_SLO_PERCENTILE, KNEECAP_MIN_CAP, KNEECAP_MAX_CAP,
// KNEECAP_INITIAL_CAP and KNEECAP_PREFILL_PACING; fixed at
// KNEECAP_MAX_CONCURRENCY when set. A request's queue bound reaches the
// deadline check with the request (admission.Request.MaxWait; see
// control.Controller.Admit).
func newAdaptive(h Host, onChange func(time.Time, control.Decision)) (*adaptive, error) {
	t := h.Config.Targets()
	cc := control.ControllerConfig{
		TTFT: t.TTFT, TPOT: t.TPOT, E2E: t.E2E,
		Percentile: h.Config.SLOPercentile, MinCap: h.Config.MinCap, MaxCap: h.Config.MaxCap,
		NoPacing:      !h.Config.PrefillPacing,
		NoTokenBudget: !h.Config.TokenBudget,
		DecodeStep:    h.Config.DecodeStep,
		NoCachedCost:  !h.Config.CachedCost,
		InitialCap:    h.Config.InitialCap,
	}
	if n := h.Config.MaxConcurrency; n > 0 {
		cc.Fixed, cc.InitialCap, cc.MaxCap = true, n, max(cc.MaxCap, n)
	} else if h.Config.StateFile != "" {
		cc.InitialCap, cc.Prior = restore(h, cc.InitialCap)
	}
	lc := control.LoopConfig{
		Controller: cc, Limiter: h.Limiter, Logger: h.Logger, Registerer: h.Registerer,
		OnChange: onChange,
	}
	if em := h.EngineMetrics; em != nil {
		lc.Engine = func() (control.EngineReading, bool) {
			r, ok := em.Latest()
			return control.EngineReading{KVTokens: r.KVTokens, Running: r.Running, Waiting: r.Waiting}, ok
		}
	}
	l, err := control.NewLoop(lc)
	if err != nil {
		return nil, err
	}
	return &adaptive{Loop: l, lim: h.Limiter}, nil
}

// FirstChunk implements proxy.Observer.
func (a *adaptive) FirstChunk(fc proxy.FirstChunk) {
	a.Loop.FirstChunk(fc.At, fc.Running, fc.EngineTTFT)
}

// Chunk implements proxy.Observer; the proxy calls Chunks instead.
func (a *adaptive) Chunk(ch proxy.Chunk) { a.Loop.Chunk(ch.At, ch.Running, ch.Gap) }

// Chunks implements proxy.ChunksObserver: the chunks of one flush, one
// lock of the loop for all.
func (a *adaptive) Chunks(cs []proxy.Chunk) {
	a.Loop.Chunks(len(cs), func(i int) (time.Time, int, time.Duration) {
		c := &cs[i]
		return c.At, c.Running, c.Gap
	})
}

// Done implements proxy.Observer; the running count is read from the
// limiter as the request ends.
func (a *adaptive) Done(r slo.Record) {
	a.Loop.Finished(time.Now(), r, a.lim.State().Running)
}

// LearntEngine is what a state file must have been learnt on to be
// restored by a gateway of configuration c: its engine and its targets.
func LearntEngine(c Config) learnt.Engine {
	t := c.Targets()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return learnt.Engine{Upstream: c.Upstream.Redacted(), TTFTms: ms(t.TTFT), TPOTms: ms(t.TPOT), E2Ems: ms(t.E2E), Percentile: c.SLOPercentile}
}

// restore is what the state file (KNEECAP_STATE_FILE) gives the
// controller to start from: its cap, within KNEECAP_MIN_CAP and
// KNEECAP_MAX_CAP, and the engine's costs in tokens (nil when not learnt);
// initial and nil when there is nothing to restore. Either way one log
// line says why.
func restore(h Host, initial int) (int, *control.Prior) {
	s, err := learnt.Load(h.Config.StateFile, LearntEngine(h.Config), h.Config.StateMaxAge, time.Now())
	switch {
	case errors.Is(err, learnt.ErrMissing):
		h.Logger.Info("state file: none yet, a cold start", "file", h.Config.StateFile)
		return initial, nil
	case err != nil:
		h.Logger.Warn("state file not restored, a cold start", "err", err.Error())
		return initial, nil
	}
	n := max(s.Cap, h.Config.MinCap)
	if h.Config.MaxCap > 0 {
		n = min(n, h.Config.MaxCap)
	}
	k := s.Costs
	p := &control.Prior{PrefillBase: k.PrefillBase, PrefillSteps: k.PrefillSteps, PrefillPerToken: k.PrefillPerToken,
		StepBase: k.StepBase, StepPerRunning: k.StepPerRunning, StepPerKVToken: k.StepPerKVToken,
		MeanPrompt: k.MeanPrompt, KVPerRunning: k.KVPerRunning, Cap: n}
	if !p.Valid() {
		p = nil // not learnt yet, or out of every engine's range: the cap alone
	}
	h.Logger.Info("state file restored", "file", h.Config.StateFile, "cap", n, "costs", p != nil, "saved_at", s.SavedAt)
	return n, p
}

// saveState writes the controller's state to the state file.
func (a *adaptive) saveState(cfg Config) error {
	sn := a.Loop.Snapshot()
	p := sn.Prior
	return learnt.Save(cfg.StateFile, learnt.State{
		SavedAt: time.Now(), Engine: LearntEngine(cfg), Cap: sn.Cap,
		GapA: sn.GapA, GapB: sn.GapB, TTFTA: sn.TTFTA, TTFTB: sn.TTFTB, Reason: sn.Reason,
		Costs: learnt.Costs{PrefillBase: p.PrefillBase, PrefillSteps: p.PrefillSteps, PrefillPerToken: p.PrefillPerToken,
			StepBase: p.StepBase, StepPerRunning: p.StepPerRunning, StepPerKVToken: p.StepPerKVToken,
			MeanPrompt: p.MeanPrompt, KVPerRunning: p.KVPerRunning},
	})
}

// keepState writes the state file every learnt.SaveInterval and once more
// when ctx ends; a failed write is logged and tried again at the next.
func (g *Gateway) keepState(ctx context.Context, a *adaptive) {
	t := time.NewTicker(learnt.SaveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := a.saveState(g.cfg); err != nil {
				g.log.Warn("state file not written", "err", err.Error())
			}
			return
		case <-t.C:
			if err := a.saveState(g.cfg); err != nil {
				g.log.Warn("state file not written", "err", err.Error())
			}
		}
	}
}

// SaveState writes the adaptive controller's state to KNEECAP_STATE_FILE
// now (the gateway also writes it every learnt.SaveInterval and at its
// end); an error without a state file or an adaptive controller.
func (g *Gateway) SaveState() error {
	a, ok := g.ctrl.(*adaptive)
	if !ok || !g.adaptive || g.cfg.StateFile == "" {
		return errors.New("gateway: no state file (KNEECAP_STATE_FILE) or no adaptive controller")
	}
	return a.saveState(g.cfg)
}
