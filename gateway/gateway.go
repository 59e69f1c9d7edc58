package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/admission/control"
	"github.com/kneecap/kneecap/enginemetrics"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/reqlog"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/tracing"
)

// CapControl sets the cap at run time: the gateway's adapter of the
// adaptive controller (control.Controller, run by a control.Loop), or one
// wired in WithCapControl (a peer algorithm in the
// scenario suite). Run blocks until ctx ends; it must start no goroutine
// that outlives it.
type CapControl interface {
	Run(ctx context.Context) error
}

// StatusReporter is implemented by a CapControl that shows its own state
// in /status, under "controller". Status must be safe for concurrent use
// and return a JSON-encodable value.
type StatusReporter interface {
	Status() any
}

// Host is what a CapControlFunc gets to build a controller from.
type Host struct {
	// Config is the gateway's configuration; Config.MaxConcurrency == 0
	// means the operator set no static cap.
	Config Config
	// Limiter enforces the cap; the controller changes it with SetLimit.
	Limiter *admission.Limiter
	// Window holds the gateway's sliding-window statistics.
	Window *slo.Window
	// Registerer is where the controller registers its metrics.
	Registerer prometheus.Registerer
	// Logger is the gateway's logger.
	Logger *slog.Logger
	// EngineMetrics reads the engine's own KV-cache occupancy
	// (Latest); nil when KNEECAP_ENGINE_METRICS is off, and its methods
	// Latest and Status answer "nothing known" then. The gateway runs it.
	EngineMetrics *enginemetrics.Scraper
}

// CapControlFunc builds a controller once the limiter exists. Returning
// (nil, nil) keeps the static cap. The gateway wires the returned value
// further by what it implements: proxy.Observer (receives every
// observation), admission.Gate and admission.Refuser (installed as the
// limiter's hooks), StatusReporter (shown in /status).
type CapControlFunc func(Host) (CapControl, error)

// Option configures New.
type Option func(*options)

type options struct {
	transport  http.RoundTripper
	controller CapControlFunc
	static     bool
	onChange   func(time.Time, control.Decision)
	registry   *prometheus.Registry
	logger     *slog.Logger
	observers  []proxy.Observer
	traffic    net.Listener
	admin      net.Listener
}

// WithTransport sets the RoundTripper to the engine (for example one that
// dials over net.Pipe in a test harness). Without it the gateway uses its
// own http.Transport, tuned for many long streams to one host.
func WithTransport(rt http.RoundTripper) Option { return func(o *options) { o.transport = rt } }

// WithCapControl wires in another controller of the cap instead of the
// gateway's own (see New).
func WithCapControl(f CapControlFunc) Option { return func(o *options) { o.controller = f } }

// WithStaticCap wires in no controller at all (unless WithCapControl
// gives one): the cap stays Config.Limit(), nothing paces prefills, no
// request is refused for a predicted deadline miss and Retry-After is the
// limiter's own estimate (for tests of the bare relay).
func WithStaticCap() Option { return func(o *options) { o.static = true } }

// WithOnChange has the gateway's own controller call f after every change
// of the cap, in decision order and outside the controller's lock, for a
// harness that records the trajectory.
func WithOnChange(f func(now time.Time, d control.Decision)) Option {
	return func(o *options) { o.onChange = f }
}

// WithRegistry sets the Prometheus registry the gateway registers its
// metrics in and serves on /metrics. Without it the gateway makes its own
// (with the Go and process collectors).
func WithRegistry(r *prometheus.Registry) Option { return func(o *options) { o.registry = r } }

// WithLogger sets the logger. Without it nothing is logged.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithObserver adds an observer of every measurement (after the window and
// the metrics).
func WithObserver(obs proxy.Observer) Option {
	return func(o *options) { o.observers = append(o.observers, obs) }
}

// WithListeners makes Run serve on these listeners instead of listening on
// Config.Listen and Config.AdminListen (either may be nil to keep the
// configured address).
func WithListeners(traffic, admin net.Listener) Option {
	return func(o *options) { o.traffic, o.admin = traffic, admin }
}

// Gateway is kneecap's gateway: the traffic handler (proxy, admission,
// measurement), the admin handler, and Run, which serves both and drains on
// shutdown. New is passive; Run starts everything and returns when done.
type Gateway struct {
	cfg       Config
	opts      options
	log       *slog.Logger
	lim       *admission.Limiter
	win       *slo.Window
	proxy     *proxy.Proxy
	ctrl      CapControl
	adaptive  bool // the cap moves at run time (/status "adaptive")
	status    StatusReporter
	metrics   *metrics
	engine    *enginemetrics.Scraper // nil: off
	epp       *eppView               // the endpoint picker's view (epp.go)
	history   *history               // the live page's samples (livehistory.go)
	scraped   chan struct{}          // closed when the scraper's Run returned (Run sets it)
	reqlog    *reqlog.Log            // nil: no request log
	tracer    *tracing.Tracer        // nil: tracing off
	traced    chan struct{}          // closed when the tracer's Run returned (Run sets it)
	stopTrace context.CancelFunc     // ends the tracer's Run (tracing.go)
	registry  *prometheus.Registry
	transport http.RoundTripper
	traffic   http.Handler
	admin     http.Handler
	draining  atomic.Bool
	inflight  sync.WaitGroup // traffic handlers running
}

// New builds a gateway from cfg. It validates cfg, starts nothing and
// listens on nothing. It is the one place a gateway is wired: `kneecap
// serve` (cfg from the environment), the demo, the scenario suite and the
// relay benchmark (cfg as a struct) all call it. Unless an option says
// otherwise the cap is set by the gateway's own controller (package
// admission/control) from cfg: adaptive with cfg.MaxConcurrency unset,
// fixed at it when set.
func New(cfg Config, opts ...Option) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg}
	for _, o := range opts {
		o(&g.opts)
	}
	g.log = g.opts.logger
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.registry = g.opts.registry
	if g.registry == nil {
		g.registry = prometheus.NewRegistry()
		g.registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	}
	g.transport = g.opts.transport
	if g.transport == nil {
		g.transport = newTransport(cfg.UpstreamIdleTimeout)
	}
	targets := cfg.Targets()
	classes := newClasses(cfg)
	g.lim = admission.NewLimiter(admission.Config{
		Limit: cfg.Limit(), MaxQueue: cfg.MaxQueue, Classes: classes.limiterClasses(), MaxRetryAfter: cfg.MaxRetryAfter,
		Fairness: admission.Fairness{
			PromptWeight: cfg.FairPromptWeight, OutputWeight: cfg.FairOutputWeight,
			Weight: classes.weight, MaxTenants: cfg.MaxTenants,
		},
	})
	g.win = slo.NewWindow(cfg.SLOWindow, time.Now())
	m := newMetrics(g.registry)
	g.metrics = m
	g.registry.MustRegister(newStateCollector(g.lim, g.win, targets), newClassCollector(g.lim, cfg.TenantMetrics))
	observers := proxy.Observers{windowObserver{g.win}, m, newClassRequests(g.registry, classes.limiterClasses()), newGenAIMetrics(g.registry)}
	if err := g.newTracing(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}

	if u := cfg.EngineMetricsURL(); u != nil {
		em, err := enginemetrics.New(enginemetrics.Config{
			URL: u, Interval: cfg.EngineMetricsInterval, Logger: g.log, Registerer: g.registry,
			Transport: g.opts.transport, // injected: the only way to the engine (pipes); else a transport of its own
		})
		if err != nil {
			return nil, fmt.Errorf("gateway: engine metrics: %w", err)
		}
		g.engine = em
	}

	g.newEPP()

	ctrl, adaptive, err := g.controller(Host{Config: cfg, Limiter: g.lim, Window: g.win, Registerer: g.registry, Logger: g.log, EngineMetrics: g.engine})
	if err != nil {
		return nil, fmt.Errorf("gateway: controller: %w", err)
	}
	if ctrl != nil {
		g.ctrl, g.adaptive = ctrl, adaptive
		// The one place the limiter's hooks are installed.
		var hooks admission.Hooks
		hooks.Gate, _ = ctrl.(admission.Gate)
		hooks.Refuser, _ = ctrl.(admission.Refuser)
		if hooks.Gate != nil || hooks.Refuser != nil {
			g.lim.SetHooks(hooks)
		}
		if o, ok := ctrl.(proxy.Observer); ok {
			observers = append(observers, o)
		}
		g.status, _ = ctrl.(StatusReporter)
	}
	observers = append(observers, g.opts.observers...)
	prefixBlock, err := g.newRequestLog()
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.reqlog != nil {
		observers = append(observers, g.reqlog)
	}

	p, err := proxy.New(proxy.Config{
		Upstream: cfg.Upstream, Transport: g.transport, Limiter: g.lim, Targets: targets,
		MaxQueueWait: cfg.MaxQueueWait, FirstTokenTimeout: cfg.FirstTokenTimeout,
		ResponseTimeout: cfg.ResponseTimeout, StreamIdleTimeout: cfg.StreamIdleTimeout,
		ClientWriteTimeout: cfg.ClientWriteTimeout,
		MaxBodyBytes:       cfg.MaxBodyBytes, MaxBodyBytesTotal: cfg.MaxBodyBytesTotal,
		MaxModelLen: cfg.MaxModelLen, PrefixBlockTokens: prefixBlock, NoCachedCost: !cfg.CachedCost,
		Headers: cfg.HeaderPolicy(), Passthrough: cfg.PassthroughPaths, Classify: classes.classify,
		Observer: observers, Logger: g.log, Tracer: g.tracer.Tracer(), Spans: g.spans(),
	})
	if err != nil {
		return nil, err
	}
	g.proxy = p
	g.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "kneecap_upstream_retries_total",
		Help: "Requests sent to the engine a second time, on a fresh connection, because the reused keep-alive connection they were sent on failed before any response byte arrived (the engine had closed it).",
	}, func() float64 { return float64(p.Retries()) }))
	g.traffic = g.trafficRouter()
	g.history = newHistory(g.liveSample)
	g.admin = g.adminRouter()
	return g, nil
}

// controller builds the controller the options ask for: the one of
// WithCapControl, none (WithStaticCap), or the gateway's own. The
// bool says whether it moves the cap.
func (g *Gateway) controller(h Host) (CapControl, bool, error) {
	switch {
	case g.opts.controller != nil:
		c, err := g.opts.controller(h)
		return c, c != nil, err
	case g.opts.static:
		return nil, false, nil
	}
	c, err := newAdaptive(h, g.opts.onChange)
	if err != nil {
		return nil, false, err
	}
	return c, h.Config.MaxConcurrency == 0, nil
}

// maxHeaderBytes bounds the request headers a client may send (net/http's
// default is 1 MiB).
const maxHeaderBytes = 64 << 10

// trafficRouter builds the traffic handler chain: in-flight tracking (for
// drain), then the proxy, which routes by its own policy (proxy.Routes):
// generation routes admitted and measured, engine-time routes admitted,
// read-only routes relayed, every other path 404.
func (g *Gateway) trafficRouter() http.Handler {
	var h http.Handler = g.proxy
	if s := g.cfg.RefusalStatus; s != 0 && s != http.StatusTooManyRequests {
		h = refusalStatus(s, h)
	}
	h = g.eppMetricsRoute(h)
	return g.track(h)
}

func (g *Gateway) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.inflight.Add(1)
		defer g.inflight.Done()
		next.ServeHTTP(w, r)
	})
}

// Handler returns the traffic handler (serve it on any listener).
func (g *Gateway) Handler() http.Handler { return g.traffic }

// AdminHandler returns the admin handler: /metrics, /healthz, /readyz,
// /status, and the live page (/ and /live/...).
func (g *Gateway) AdminHandler() http.Handler { return g.admin }

// Limiter returns the gateway's limiter.
func (g *Gateway) Limiter() *admission.Limiter { return g.lim }

// Window returns the gateway's sliding-window statistics.
func (g *Gateway) Window() *slo.Window { return g.win }

// EngineMetrics returns the reader of the engine's own KV-cache occupancy,
// which Run runs; nil when KNEECAP_ENGINE_METRICS is off (its Latest and
// Status are safe on nil).
func (g *Gateway) EngineMetrics() *enginemetrics.Scraper { return g.engine }

// Drain starts a graceful stop of admission: /readyz turns 503, queued
// requests and every later generation request get 503 (draining); running
// streams go on. Run calls it when its context ends.
func (g *Gateway) Drain() {
	g.draining.Store(true)
	g.lim.Drain()
}

// Run listens on Config.Listen and Config.AdminListen (or the listeners
// given WithListeners), serves until ctx ends, then drains: it stops
// accepting, rejects the queue with 503, lets running streams finish for up
// to Config.DrainTimeout and then cuts them. It returns after every
// goroutine it started has ended; the error is the first failure (a
// listener that could not open, a controller error), nil after a clean
// drain.
func (g *Gateway) Run(ctx context.Context) error {
	trafficLn, adminLn := g.opts.traffic, g.opts.admin
	var err error
	if trafficLn == nil {
		if trafficLn, err = net.Listen("tcp", g.cfg.Listen); err != nil {
			return fmt.Errorf("gateway: listen %s: %w", g.cfg.Listen, err)
		}
	}
	if adminLn == nil {
		if adminLn, err = net.Listen("tcp", g.cfg.AdminListen); err != nil {
			trafficLn.Close()
			return fmt.Errorf("gateway: admin listen %s: %w", g.cfg.AdminListen, err)
		}
	}
	trafficSrv := &http.Server{
		Handler: g.traffic, ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		ReadHeaderTimeout: g.cfg.ClientHeaderTimeout, ReadTimeout: g.cfg.ClientReadTimeout,
		IdleTimeout: g.cfg.ClientIdleTimeout, MaxHeaderBytes: maxHeaderBytes,
		// No WriteTimeout: it would cut every stream longer than it. Each
		// write is bounded instead (KNEECAP_CLIENT_WRITE_TIMEOUT).
	}
	var agentLn net.Listener
	if g.cfg.AgentListen != "" {
		if agentLn, err = net.Listen("tcp", g.cfg.AgentListen); err != nil {
			trafficLn.Close()
			adminLn.Close()
			return fmt.Errorf("gateway: agent listen %s: %w", g.cfg.AgentListen, err)
		}
	}
	adminSrv := &http.Server{Handler: g.admin, ReadHeaderTimeout: 10 * time.Second}
	g.log.Info("gateway listening", "traffic", trafficLn.Addr().String(), "admin", adminLn.Addr().String(),
		"upstream", g.cfg.Upstream.Redacted(), "limit", g.lim.Limit(), "adaptive", g.adaptive, "tracing", g.tracingTarget())

	eg, egCtx := errgroup.WithContext(ctx)
	serve := func(srv *http.Server, ln net.Listener) func() error {
		return func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}
	}
	g.runTracing(eg)
	eg.Go(serve(trafficSrv, listenFirstByte(trafficLn, g.cfg.ClientIdleTimeout, g.cfg.ClientReadTimeout)))
	eg.Go(serve(adminSrv, adminLn))
	if agentLn != nil {
		eg.Go(func() error { return g.serveAgent(agentLn) })
	}
	if g.ctrl != nil {
		eg.Go(func() error {
			if err := g.ctrl.Run(egCtx); err != nil && egCtx.Err() == nil {
				return fmt.Errorf("gateway: controller: %w", err)
			}
			return nil
		})
	}
	if a, ok := g.ctrl.(*adaptive); ok && g.adaptive && g.cfg.StateFile != "" {
		eg.Go(func() error { g.keepState(egCtx, a); return nil })
	}
	if g.engine != nil {
		g.scraped = make(chan struct{})
		eg.Go(func() error {
			// Never the gateway's failure: the scraper only returns when
			// egCtx ends (or for a second Run, a bug).
			defer close(g.scraped)
			// Just before the controller's tick (every second from
			// now), never on it: a scrape at the instant the controller
			// moves the cap would read the engine before or after the
			// requests the move admits, whichever goroutine ran first
			// (in virtual time, a different run each time). And just
			// before, not half a second: the controller compares the
			// engine's running and waiting counts with the requests the
			// gateway forwarded at its tick, and half a second apart
			// they are different requests (at a cap one above the
			// engine's slots the engine's one waiting request showed in
			// a reading one time in four, and its limit went unseen).
			select {
			case <-egCtx.Done():
				return nil
			case <-time.After(scrapePhase):
			}
			if err := g.engine.Run(egCtx); err != nil {
				g.log.Error("engine metrics", "err", err)
			}
			return nil
		})
	}
	// The live page's history runs until the admin server is shut down,
	// so that it records the drain too.
	histCtx, stopHistory := context.WithCancel(context.WithoutCancel(ctx))
	eg.Go(func() error {
		g.history.Run(histCtx)
		return nil
	})
	// The request log writes until every traffic handler has returned, so
	// that it holds the requests the drain ended too.
	logCtx, stopLog := context.WithCancel(context.WithoutCancel(ctx))
	if g.reqlog != nil {
		eg.Go(func() error { return g.reqlog.Run(logCtx) })
	}
	eg.Go(func() error {
		<-egCtx.Done()
		g.shutdown(trafficSrv, adminSrv, agentLn)
		stopHistory()
		stopLog()
		return nil
	})
	return eg.Wait()
}

// scrapePhase is how long after Run starts the engine's first scrape
// runs: half a millisecond before the controller's first tick (see Run).
const scrapePhase = time.Second - 500*time.Microsecond

// shutdown drains the traffic server within DrainTimeout, then the admin
// server and the agent (which answers "drain" meanwhile), and closes the
// engine connections.
func (g *Gateway) shutdown(traffic, admin *http.Server, agent net.Listener) {
	g.log.Info("draining", "running", g.lim.Running(), "timeout", g.cfg.DrainTimeout)
	g.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.DrainTimeout)
	defer cancel()
	if err := traffic.Shutdown(ctx); err != nil {
		g.log.Warn("drain timeout: cutting running streams", "running", g.lim.Running())
		_ = traffic.Close()
	}
	g.inflight.Wait() // handlers of cut streams see their context end and return
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	if err := admin.Shutdown(actx); err != nil {
		_ = admin.Close()
	}
	if agent != nil {
		_ = agent.Close()
	}
	if g.scraped != nil {
		<-g.scraped // its last connection back in the pool, if it shares the transport
	}
	if t, ok := g.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	g.stopTracing() // the spans of every request have ended
	g.log.Info("drained")
}

// windowObserver feeds the sliding window: a stream's gaps in batches
// (proxy.GapObserver), its record when it ends.
type windowObserver struct{ w *slo.Window }

var _ proxy.GapObserver = windowObserver{}

func (o windowObserver) FirstChunk(proxy.FirstChunk) {}
func (o windowObserver) Chunk(c proxy.Chunk)         { o.w.AddITL(c.At, c.Gap) } // the proxy calls Gaps
func (o windowObserver) Done(r slo.Record)           { o.w.Add(time.Now(), &r) }

func (o windowObserver) Gaps(cs []proxy.Chunk) {
	o.w.AddITLs(len(cs), func(i int) (time.Time, time.Duration) { return cs[i].At, cs[i].Gap })
}
