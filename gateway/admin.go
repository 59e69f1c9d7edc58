package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kneecap/kneecap/slo"
)

// readyTimeout bounds one probe of the engine's health path.
const readyTimeout = 2 * time.Second

func (g *Gateway) adminRouter() http.Handler {
	r := chi.NewRouter()
	r.Handle("/metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{Registry: g.registry, EnableOpenMetrics: true}))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	r.Get("/readyz", g.serveReady)
	r.Get("/status", g.serveStatus)
	return r
}

// serveReady answers 200 when the gateway accepts traffic and the engine
// answers its health path with a 2xx, 503 otherwise (draining, or engine
// unreachable or unhealthy).
func (g *Gateway) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if g.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "draining\n")
		return
	}
	if err := g.probeEngine(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "engine not ready: "+err.Error()+"\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

type statusError string

func (e statusError) Error() string { return string(e) }

func (g *Gateway) probeEngine(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	u := *g.cfg.Upstream
	u.Path, u.RawPath, u.RawQuery = joinURLPath(u.Path, g.cfg.UpstreamHealthPath), "", ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := g.transport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(resp.Status)
	}
	return nil
}

func joinURLPath(base, p string) string {
	if len(base) > 0 && base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	return base + p
}

// Status is the JSON body of /status. Durations are in seconds, as in the
// metrics.
type Status struct {
	Limit    int     `json:"limit"`
	Running  int     `json:"running"`
	Queued   int     `json:"queued"`
	Draining bool    `json:"draining"`
	Adaptive bool    `json:"adaptive"`
	MeanHold float64 `json:"mean_slot_hold_seconds"`
	// DemandRatio is as kneecap_demand_ratio.
	DemandRatio float64       `json:"demand_ratio"`
	Targets     TargetsStatus `json:"targets"`
	Window      WindowStatus  `json:"window"`
	// Controller is the controller's own state (StatusReporter), if any.
	Controller any `json:"controller,omitempty"`
}

// TargetsStatus lists the operator's targets in seconds (0 = unset).
type TargetsStatus struct {
	TTFT float64 `json:"ttft_seconds"`
	TPOT float64 `json:"tpot_seconds"`
	E2E  float64 `json:"e2e_seconds"`
}

// WindowStatus is slo.Stats in JSON form.
type WindowStatus struct {
	Seconds       float64 `json:"seconds"`
	Requests      int     `json:"requests"`
	Good          int     `json:"good"`
	Missed        int     `json:"missed"`
	Rejected      int     `json:"rejected"`
	EngineErrors  int     `json:"engine_errors"`
	Cancelled     int     `json:"client_cancelled"`
	Invalid       int     `json:"invalid"`
	Goodput       float64 `json:"goodput_requests_per_second"`
	Attainment    float64 `json:"attainment_ratio"`
	RejectionRate float64 `json:"rejections_per_second"`
	Throughput    float64 `json:"output_tokens_per_second"`

	TTFT       QuantilesStatus `json:"ttft"`
	EngineTTFT QuantilesStatus `json:"engine_ttft"`
	TPOT       QuantilesStatus `json:"tpot"`
	ITL        QuantilesStatus `json:"itl"`
	E2E        QuantilesStatus `json:"e2e"`
	QueueWait  QuantilesStatus `json:"queue_wait"`
}

// QuantilesStatus is slo.Quantiles in seconds.
type QuantilesStatus struct {
	P50   float64 `json:"p50_seconds"`
	P90   float64 `json:"p90_seconds"`
	P99   float64 `json:"p99_seconds"`
	Mean  float64 `json:"mean_seconds"`
	Count int     `json:"count"`
}

func quantilesStatus(q slo.Quantiles) QuantilesStatus {
	return QuantilesStatus{P50: q.P50.Seconds(), P90: q.P90.Seconds(), P99: q.P99.Seconds(), Mean: q.Mean.Seconds(), Count: q.Count}
}

// Status returns the gateway's state, as /status shows it.
func (g *Gateway) Status() Status {
	st := g.lim.State()
	ws := g.win.Stats(st.Now)
	t := g.cfg.Targets()
	s := Status{
		Limit: st.Limit, Running: st.Running, Queued: st.Queued, Draining: st.Draining,
		Adaptive: g.ctrl != nil, MeanHold: st.MeanHold.Seconds(), DemandRatio: DemandRatio(st, ws),
		Targets: TargetsStatus{TTFT: t.TTFT.Seconds(), TPOT: t.TPOT.Seconds(), E2E: t.E2E.Seconds()},
		Window: WindowStatus{
			Seconds: ws.Span.Seconds(), Requests: ws.Requests, Good: ws.Good, Missed: ws.Missed,
			Rejected: ws.Rejected, EngineErrors: ws.EngineErrors, Cancelled: ws.Cancelled, Invalid: ws.Invalid,
			Goodput: ws.Goodput, Attainment: ws.Attainment, RejectionRate: ws.RejectionRate, Throughput: ws.Throughput,
			TTFT: quantilesStatus(ws.TTFT), EngineTTFT: quantilesStatus(ws.EngineTTFT), TPOT: quantilesStatus(ws.TPOT),
			ITL: quantilesStatus(ws.ITL), E2E: quantilesStatus(ws.E2E), QueueWait: quantilesStatus(ws.QueueWait),
		},
	}
	if g.status != nil {
		s.Controller = g.status.Status()
	}
	return s
}

func (g *Gateway) serveStatus(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(g.Status())
}
