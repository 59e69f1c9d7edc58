// Package adaptive plugs the adaptive controller of package admission into
// the gateway.
//
// # Overview
//
// [New] returns a gateway.ControllerFunc. With KNEECAP_MAX_CONCURRENCY
// unset the controller sets the cap itself (admission.Controller); with it
// set the cap stays where the operator put it, but the controller still
// learns the latency model, refuses at once a request predicted to miss
// its TTFT target in the queue (reason "deadline"), and computes
// Retry-After. [Controller] adapts the proxy's observations to the
// controller's, and is the gateway's Controller, Observer, Gate,
// RetryEstimator and StatusReporter at once. [ConfigFromEnv] reads the
// knobs KNEECAP_SLO_PERCENTILE (0.9), KNEECAP_MIN_CAP (1) and
// KNEECAP_MAX_CAP (unset: admission.DefaultMaxCap, 512; at most
// admission.CapLimit, 4096), with the same bounds and errors as
// gateway.Config.Validate, which reads them too.
//
// # Concurrency model
//
// A Controller is safe for concurrent use: the admission.Runner it wraps
// serialises everything under one mutex. Run is its only goroutine and ends
// with its context.
//
// # Ownership
//
// Owned by the adaptive-admission work stream. The gateway owns the
// limiter; the controller changes it only through SetLimit and the hooks.
package adaptive

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
)

// Config holds the controller's knobs (KNEECAP_ prefix). The zero value of
// each field means its default.
type Config struct {
	// Percentile is the share of requests that must meet every target at
	// the chosen cap.
	Percentile float64 `env:"SLO_PERCENTILE" envDefault:"0.9"`
	// MinCap and MaxCap bound the cap; MaxCap 0 means
	// admission.DefaultMaxCap.
	MinCap int `env:"MIN_CAP" envDefault:"1"`
	MaxCap int `env:"MAX_CAP"`
	// OnChange, when set, is told about every change of the cap (for a
	// harness recording the trajectory); not from the environment.
	OnChange func(now time.Time, d admission.Decision) `env:"-"`
}

// ConfigFromEnv reads the knobs from environ (as os.Environ returns it).
// A bad value is a *gateway.SettingError naming the variable; the bounds
// are gateway.Config.Validate's (the gateway reads the same variables), so
// that the two never disagree on a value.
func ConfigFromEnv(environ []string) (Config, error) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	var c Config
	if err := env.ParseWithOptions(&c, env.Options{Prefix: gateway.EnvPrefix, Environment: m}); err != nil {
		var agg env.AggregateError
		if errors.As(err, &agg) && len(agg.Errors) > 0 {
			err = agg.Errors[0]
		}
		var pe env.ParseError
		if errors.As(err, &pe) {
			return c, bad(pe.Name, "cannot parse as a number: %v", unwrapAll(pe.Err))
		}
		return c, err
	}
	return c, c.validate()
}

// validate checks the knobs as gateway.Config.Validate checks the same
// variables, in the same order and with the same messages.
func (c Config) validate() error {
	switch {
	case !(c.Percentile > 0 && c.Percentile < 1): // NaN too
		return bad("Percentile", "must be between 0 and 1 (exclusive), e.g. 0.9")
	case c.MinCap < 1:
		return bad("MinCap", "must be at least 1")
	case c.MaxCap != 0 && c.MaxCap < c.MinCap:
		return bad("MaxCap", "must be 0 (unset) or at least KNEECAP_MIN_CAP (%d)", c.MinCap)
	case c.MaxCap > admission.CapLimit:
		return bad("MaxCap", "must be at most %d, four times the largest default of vLLM's max_num_seqs (1024)", admission.CapLimit)
	case c.MinCap > admission.CapLimit:
		return bad("MinCap", "must be at most %d (the highest KNEECAP_MAX_CAP)", admission.CapLimit)
	}
	return nil
}

// bad is a *gateway.SettingError naming the variable of a Config field.
func bad(field, format string, args ...any) error {
	name := map[string]string{"Percentile": "SLO_PERCENTILE", "MinCap": "MIN_CAP", "MaxCap": "MAX_CAP"}[field]
	return &gateway.SettingError{Var: gateway.EnvPrefix + name, Err: fmt.Errorf(format, args...)}
}

func unwrapAll(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// New returns the ControllerFunc that builds a Controller for the gateway:
// adaptive when the gateway's MaxConcurrency is unset, fixed at it when set.
// The knobs come from the gateway's configuration (KNEECAP_SLO_PERCENTILE,
// KNEECAP_MIN_CAP, KNEECAP_MAX_CAP); a non-zero field of cfg overrides one.
func New(cfg Config) gateway.ControllerFunc {
	return func(h gateway.Host) (gateway.Controller, error) {
		t := h.Config.Targets()
		cc := admission.ControllerConfig{
			TTFT: t.TTFT, TPOT: t.TPOT, E2E: t.E2E,
			Percentile: h.Config.SLOPercentile, MinCap: h.Config.MinCap, MaxCap: h.Config.MaxCap,
			NoPacing: !h.Config.PrefillPacing,
		}
		if cfg.Percentile > 0 {
			cc.Percentile = cfg.Percentile
		}
		if cfg.MinCap > 0 {
			cc.MinCap = cfg.MinCap
		}
		if cfg.MaxCap > 0 {
			cc.MaxCap = cfg.MaxCap
		}
		if n := h.Config.MaxConcurrency; n > 0 {
			cc.Fixed, cc.InitialCap, cc.MaxCap = true, n, max(cc.MaxCap, n)
		}
		r, err := admission.NewRunner(admission.RunnerConfig{
			Controller: cc, Limiter: h.Limiter, Logger: h.Logger, Registerer: h.Registerer,
			OnChange: cfg.OnChange,
		})
		if err != nil {
			return nil, err
		}
		return &Controller{Runner: r, lim: h.Limiter}, nil
	}
}

// Controller is the gateway's view of an admission.Runner: it receives the
// proxy's observations and is the limiter's Gate and RetryEstimator.
type Controller struct {
	*admission.Runner
	lim *admission.Limiter
}

var (
	_ gateway.Controller       = (*Controller)(nil)
	_ gateway.StatusReporter   = (*Controller)(nil)
	_ proxy.Observer           = (*Controller)(nil)
	_ admission.Gate           = (*Controller)(nil)
	_ admission.RetryEstimator = (*Controller)(nil)
)

// NewController wraps a runner driving lim (for harnesses that build the
// limiter and proxy themselves).
func NewController(r *admission.Runner, lim *admission.Limiter) *Controller {
	return &Controller{Runner: r, lim: lim}
}

// FirstChunk implements proxy.Observer.
func (c *Controller) FirstChunk(fc proxy.FirstChunk) {
	c.Runner.FirstChunk(fc.At, fc.Running, fc.EngineTTFT)
}

// Chunk implements proxy.Observer.
func (c *Controller) Chunk(ch proxy.Chunk) { c.Runner.Chunk(ch.At, ch.Running, ch.Gap) }

// Done implements proxy.Observer; the running count is read from the
// limiter as the request ends.
func (c *Controller) Done(r slo.Record) {
	c.Runner.Finished(time.Now(), r, c.lim.State().Running)
}
