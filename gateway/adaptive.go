package gateway

import (
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/admission/control"
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
		InitialCap:    h.Config.InitialCap,
	}
	if n := h.Config.MaxConcurrency; n > 0 {
		cc.Fixed, cc.InitialCap, cc.MaxCap = true, n, max(cc.MaxCap, n)
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
