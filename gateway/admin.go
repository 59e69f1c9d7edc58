package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/kneecap/kneecap/admission"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kneecap/kneecap/admission/control"
	"github.com/kneecap/kneecap/enginemetrics"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/wire"
)

// readyTimeout bounds one probe of the engine's health path.
const readyTimeout = 2 * time.Second

func (g *Gateway) adminRouter() http.Handler {
	r := chi.NewRouter()
	r.Handle("/metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{Registry: g.registry, EnableOpenMetrics: true}))
	// The endpoint picker's view alone: a few lines, for a picker that
	// scrapes every 50 ms (its default) without the whole registry.
	epp := prometheus.NewRegistry()
	epp.MustRegister(g.epp.Collector())
	r.Handle("/metrics/epp", promhttp.HandlerFor(epp, promhttp.HandlerOpts{}))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	r.Get("/readyz", g.serveReady)
	r.Get("/status", g.serveStatus)
	g.routeLivePage(r)
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
// metrics. Every number that is not a count is a control.Float: NaN or
// infinity encodes as null instead of failing the document.
type Status struct {
	Limit    int           `json:"limit"`
	Running  int           `json:"running"`
	Queued   int           `json:"queued"`
	Draining bool          `json:"draining"`
	Adaptive bool          `json:"adaptive"` // the cap moves at run time: false for a static or fixed cap
	MeanHold control.Float `json:"mean_slot_hold_seconds"`
	// DemandRatio is as kneecap_demand_ratio.
	DemandRatio control.Float `json:"demand_ratio"`
	Targets     TargetsStatus `json:"targets"`
	Window      WindowStatus  `json:"window"`
	// Rejections counts the requests refused since the gateway started,
	// by reason (as kneecap_rejections_total).
	Rejections map[string]int64 `json:"rejections_total"`
	// Classes are the priority classes, highest first; Tenants the most
	// served tenants (KNEECAP_TENANT_METRICS of them), the rest as
	// "other".
	Classes []ClassStatus  `json:"classes"`
	Tenants []TenantStatus `json:"tenants"`
	// Admission is what the limiter holds beside the count: the prefill
	// work under way, the KV tokens of the running requests, and why
	// requests were held (see admission.HeldCounts).
	Admission AdmissionStatus `json:"admission"`
	// NotStreamed is what the gateway does with requests whose clients do
	// not stream.
	NotStreamed NotStreamedStatus `json:"not_streamed"`
	// Controller is the controller's own state (StatusReporter), if any.
	Controller any `json:"controller,omitempty"`
	// EngineMetrics is the reading of the engine's own metrics endpoint
	// (state "off" without one): its state, last error, the newest
	// reading of the KV cache, scrapes and failures.
	EngineMetrics enginemetrics.Status `json:"engine_metrics"`
}

// AdmissionStatus is the limiter's token state for /status.
type AdmissionStatus struct {
	PrefillTokens int                  `json:"prefill_tokens"`
	ResidentKV    int                  `json:"kv_tokens"`
	Held          admission.HeldCounts `json:"held"`
	// Outside is the demand refused and expected back, and the slot time
	// left idle while demand waited (admission.OutsideStats).
	Outside OutsideStatus `json:"outside"`
}

// OutsideStatus is admission.OutsideStats for /status, in seconds.
type OutsideStatus struct {
	Away            int           `json:"away"`
	IdleSlotSeconds control.Float `json:"idle_slot_seconds"`
	Returned        int64         `json:"returned"`
	RefusedAgain    int64         `json:"refused_again"`
	GaveUp          int64         `json:"gave_up"`
	LatenessSeconds control.Float `json:"return_lateness_seconds"`
	HonouredSeconds control.Float `json:"honoured_retry_after_seconds"`
}

// NotStreamedStatus says which generation routes reassemble a request
// that is not streamed (stream it from the engine, measure it as a stream,
// answer with the JSON body the engine would have sent) and which relay it
// whole, the request fields that keep one whole on a reassembling route,
// and how many admitted requests went each way since the gateway started.
// Such a request is judged by E2E alone (its E2E target, else TTFT + TPOT
// x (output tokens - 1)).
type NotStreamedStatus struct {
	ReassembledRoutes []string `json:"reassembled_routes"`
	WholeRoutes       []string `json:"whole_routes"`
	WholeOnlyFields   []string `json:"whole_only_fields"`
	Reassembled       int64    `json:"reassembled"`
	Whole             int64    `json:"whole"`
}

// notStreamedStatus lists the routes from the proxy's table.
func (g *Gateway) notStreamedStatus() NotStreamedStatus {
	s := NotStreamedStatus{ReassembledRoutes: []string{}, WholeRoutes: []string{}, WholeOnlyFields: []string{}}
	for _, rt := range proxy.Routes {
		switch {
		case rt.Access != proxy.Generation:
		case rt.Reassemble:
			s.ReassembledRoutes = append(s.ReassembledRoutes, rt.Path)
		default:
			s.WholeRoutes = append(s.WholeRoutes, rt.Path)
		}
	}
	for _, f := range wire.WholeOnly {
		s.WholeOnlyFields = append(s.WholeOnlyFields, f.Field)
	}
	s.Reassembled, s.Whole = g.metrics.reassembled.Load(), g.metrics.whole.Load()
	return s
}

// TargetsStatus lists the operator's targets in seconds (0 = unset).
type TargetsStatus struct {
	TTFT control.Float `json:"ttft_seconds"`
	TPOT control.Float `json:"tpot_seconds"`
	E2E  control.Float `json:"e2e_seconds"`
}

// WindowStatus is slo.Stats in JSON form.
type WindowStatus struct {
	Seconds       control.Float `json:"seconds"`
	Requests      int           `json:"requests"`
	Good          int           `json:"good"`
	Missed        int           `json:"missed"`
	Rejected      int           `json:"rejected"`
	EngineErrors  int           `json:"engine_errors"`
	Cancelled     int           `json:"client_cancelled"`
	Invalid       int           `json:"invalid"`
	Goodput       control.Float `json:"goodput_requests_per_second"`
	Attainment    control.Float `json:"attainment_ratio"`
	RejectionRate control.Float `json:"rejections_per_second"`
	Throughput    control.Float `json:"output_tokens_per_second"`

	TTFT       QuantilesStatus `json:"ttft"`
	EngineTTFT QuantilesStatus `json:"engine_ttft"`
	TPOT       QuantilesStatus `json:"tpot"`
	ITL        QuantilesStatus `json:"itl"`
	E2E        QuantilesStatus `json:"e2e"`
	QueueWait  QuantilesStatus `json:"queue_wait"`
}

// QuantilesStatus is slo.Quantiles in seconds.
type QuantilesStatus struct {
	P50   control.Float `json:"p50_seconds"`
	P90   control.Float `json:"p90_seconds"`
	P99   control.Float `json:"p99_seconds"`
	Mean  control.Float `json:"mean_seconds"`
	Count int           `json:"count"`
}

func quantilesStatus(q slo.Quantiles) QuantilesStatus {
	return QuantilesStatus{P50: secs(q.P50), P90: secs(q.P90), P99: secs(q.P99), Mean: secs(q.Mean), Count: q.Count}
}

func secs(d time.Duration) control.Float { return control.Float(d.Seconds()) }

// Status returns the gateway's state, as /status shows it.
func (g *Gateway) Status() Status {
	st := g.lim.State()
	ws := g.win.Stats(st.Now)
	t := g.cfg.Targets()
	s := Status{
		Limit: st.Limit, Running: st.Running, Queued: st.Queued, Draining: st.Draining,
		Adaptive: g.adaptive, MeanHold: secs(st.MeanHold), DemandRatio: control.Float(DemandRatio(st, ws)),
		Admission: AdmissionStatus{PrefillTokens: st.PrefillTokens, ResidentKV: st.ResidentKV, Held: g.lim.Held(), Outside: outsideStatus(g.lim.Outside())},
		Targets:   TargetsStatus{TTFT: secs(t.TTFT), TPOT: secs(t.TPOT), E2E: secs(t.E2E)},
		Window: WindowStatus{
			Seconds: secs(ws.Span), Requests: ws.Requests, Good: ws.Good, Missed: ws.Missed,
			Rejected: ws.Rejected, EngineErrors: ws.EngineErrors, Cancelled: ws.Cancelled, Invalid: ws.Invalid,
			Goodput: control.Float(ws.Goodput), Attainment: control.Float(ws.Attainment),
			RejectionRate: control.Float(ws.RejectionRate), Throughput: control.Float(ws.Throughput),
			TTFT: quantilesStatus(ws.TTFT), EngineTTFT: quantilesStatus(ws.EngineTTFT), TPOT: quantilesStatus(ws.TPOT),
			ITL: quantilesStatus(ws.ITL), E2E: quantilesStatus(ws.E2E), QueueWait: quantilesStatus(ws.QueueWait),
		},
	}
	s.Rejections = g.metrics.rejectedByReason()
	s.Classes, s.Tenants = classesStatus(g.lim, g.cfg.TenantMetrics)
	s.NotStreamed = g.notStreamedStatus()
	if g.status != nil {
		s.Controller = g.status.Status()
	}
	s.EngineMetrics = g.engine.Status()
	return s
}

// serveStatus encodes the status into a buffer first: an encoding error
// (a controller's Status holding a NaN in a plain float64, say) is a 500
// with an OpenAI-shaped error body, and is logged, never a 200 with an
// empty or truncated body.
func (g *Gateway) serveStatus(w http.ResponseWriter, _ *http.Request) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(g.Status()); err != nil {
		g.log.Error("cannot encode /status", "err", err)
		wire.WriteError(w, http.StatusInternalServerError, wire.TypeServer, "status_encoding",
			"the gateway could not encode its status: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}

func outsideStatus(o admission.OutsideStats) OutsideStatus {
	return OutsideStatus{
		Away: o.Away, IdleSlotSeconds: control.Float(o.IdleSlotTime.Seconds()), Returned: o.Returned,
		RefusedAgain: o.RefusedAgain, GaveUp: o.GaveUp, LatenessSeconds: control.Float(o.Lateness.Seconds()),
		HonouredSeconds: control.Float(o.Honoured.Seconds()),
	}
}
