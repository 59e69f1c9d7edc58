package gateway

import (
	"net/http"

	"github.com/kneecap/kneecap/eppmetrics"
)

// eppView is the endpoint picker's view of the pod (package eppmetrics).
type eppView = eppmetrics.View

// newEPP builds the view from the limiter and the engine's scraper and
// registers its kneecap_epp_* series.
func (g *Gateway) newEPP() {
	g.epp = eppmetrics.New(eppmetrics.Config{Limiter: g.lim, Engine: g.engine,
		SaturatedWaiting: g.cfg.EPPSaturatedWaiting, MaxQueue: g.cfg.MaxQueue})
	g.registry.MustRegister(g.epp.Collector())
}

// eppMetricsRoute has the traffic port answer GET and HEAD /metrics with the
// endpoint picker's view in an engine's names when Config.EPPMetrics asks
// for it (the engine's body passed through, its waiting and running
// replaced); otherwise it returns next as it is, so that nothing is added
// in front of the proxy.
func (g *Gateway) eppMetricsRoute(next http.Handler) http.Handler {
	names, err := eppmetrics.NamesFor(g.cfg.EPPMetrics)
	if err != nil { // off (Validate accepts nothing else)
		return next
	}
	metrics := g.epp.Handler(eppmetrics.HandlerConfig{
		Names: names, Engine: g.cfg.EngineMetricsURL(), Transport: g.transport,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			metrics.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
