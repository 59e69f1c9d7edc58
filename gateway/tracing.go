package gateway

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/tracing"
)

// tracingFromEnv reads Config.Tracing from the standard OTEL_* variables
// of environ (see tracing.FromEnv); a bad value is a *SettingError naming
// the variable, as every other setting's.
func tracingFromEnv(env map[string]string) (tracing.Config, error) {
	c, err := tracing.FromEnv(env)
	var ve *tracing.VarError
	if errors.As(err, &ve) {
		return c, &SettingError{Var: ve.Var, Err: ve.Err}
	}
	return c, err
}

// newTracing builds the tracer of Config.Tracing (none when it is off) and
// registers its counters.
func (g *Gateway) newTracing() error {
	if !g.cfg.Tracing.Enabled() {
		return nil
	}
	t, err := tracing.New(g.cfg.Tracing, g.log)
	if err != nil {
		return err
	}
	g.tracer = t
	g.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kneecap_tracing_spans_dropped_total",
			Help: "Sampled spans lost on the way to the OpenTelemetry collector: dropped from the full export queue (a collector slow, down or hanging), in a failed export, or left at shutdown. Requests are never held for a span.",
		}, func() float64 { return float64(t.Dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kneecap_tracing_spans_exported_total",
			Help: "Spans the OpenTelemetry collector accepted.",
		}, func() float64 { return float64(t.Exported()) }))
	return nil
}

// spans is the proxy's Spans: the tracer's goroutine ends the spans; nil
// when tracing is off.
func (g *Gateway) spans() proxy.Spans {
	if g.tracer == nil {
		return nil
	}
	return g.tracer
}

// Tracing returns the gateway's tracer, which Run runs; nil when tracing
// is off.
func (g *Gateway) Tracing() *tracing.Tracer { return g.tracer }

// runTracing runs the tracer's exports under eg until stopTracing. Its
// context is not eg's: spans keep ending while the traffic drains.
func (g *Gateway) runTracing(eg *errgroup.Group) {
	if g.tracer == nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	g.traced, g.stopTrace = make(chan struct{}), stop
	eg.Go(func() error {
		defer close(g.traced)
		return g.tracer.Run(ctx)
	})
}

// stopTracing ends the tracer's Run once no span can end any more (every
// traffic handler has returned) and waits for it: its last exports take
// tracing.ShutdownTimeout at most, a collector that hangs included.
func (g *Gateway) stopTracing() {
	if g.traced == nil {
		return
	}
	g.stopTrace()
	<-g.traced
}

// tracingTarget is where spans go, for the startup log line ("off").
func (g *Gateway) tracingTarget() string {
	if g.tracer == nil {
		return "off"
	}
	return g.tracer.Endpoint()
}
