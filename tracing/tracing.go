package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ShutdownTimeout bounds what Run does once its context has ended: the
// last exports and the exporter's shutdown. A collector that hangs holds
// the gateway's shutdown this long at most.
const ShutdownTimeout = 5 * time.Second

// ScopeName is the instrumentation scope of kneecap's spans.
const ScopeName = "github.com/kneecap/kneecap"

// Tracer is the gateway's tracing: the official SDK's TracerProvider
// (sampler and resource from Config), whose sampled spans wait in a
// bounded queue for an OTLP/HTTP exporter. New is passive; Run exports
// until its context ends. Spans ended while Run is not running wait in the
// queue, and are dropped and counted once it is full.
type Tracer struct {
	cfg      Config
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	q        *queue
	client   *http.Client
	direct   bool // End writes spans to the exporter without the SDK's end
}

// New builds the tracer of cfg, which must be Enabled. It starts nothing
// and connects to nothing. log receives a line when exports start failing
// and when they recover; nil means none.
func New(cfg Config, log *slog.Logger) (*Tracer, error) {
	if !cfg.Enabled() {
		return nil, fmt.Errorf("tracing: no endpoint")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := or(cfg.Timeout, DefaultTimeout)
	// A transport of its own, so that Run can close its connections: the
	// exporter's default is shared by every exporter of the process.
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        4,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: timeout,
		TLSClientConfig:     cfg.TLS,
	}
	t := &Tracer{cfg: cfg, client: &http.Client{Transport: tr, Timeout: timeout}}
	exp, err := newSpanExporter(cfg, t.client)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	t.q = newQueue(exp, or(cfg.MaxQueue, DefaultMaxQueue), or(cfg.MaxBatch, DefaultMaxBatch),
		or(cfg.Delay, DefaultDelay), or(cfg.ExportTimeout, DefaultExportTimeout), log)
	res, err := resource.New(context.Background(), resource.WithTelemetrySDK(), resource.WithHost(),
		resource.WithAttributes(cfg.Resource...),
		resource.WithAttributes(attribute.String("service.name", serviceName(cfg))))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	_, stages := exp.(endedStager)
	t.direct = stages && directLimits(sdktrace.NewSpanLimits())
	t.provider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler(cfg.Sampler, cfg.SamplerArg)),
		sdktrace.WithResource(res), sdktrace.WithSpanProcessor(t.q))
	t.tracer = t.provider.Tracer(ScopeName)
	return t, nil
}

// newSpanExporter is the OTLP/HTTP exporter of cfg on client: kneecap's
// own for http/protobuf (exporter: the same bytes, headers and retries as
// the official one's, at a fraction of its cost), the official
// otlptracehttp for http/json.
func newSpanExporter(cfg Config, client *http.Client) (sdktrace.SpanExporter, error) {
	if !cfg.JSON {
		return newExporter(cfg.Endpoint.String(), cfg.Headers, cfg.Gzip, client), nil
	}
	opts := []otlptracehttp.Option{
		otlptracehttp.WithEndpointURL(cfg.Endpoint.String()),
		otlptracehttp.WithHTTPClient(client),
		otlptracehttp.WithHeaders(cfg.Headers),
		otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON),
		otlptracehttp.WithCompression(otlptracehttp.NoCompression),
	}
	if cfg.Gzip {
		opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	}
	// Its client's Start does no I/O: the exporter is passive too.
	return otlptracehttp.New(context.Background(), opts...)
}

// serviceName is OTEL_SERVICE_NAME, else the service.name of
// OTEL_RESOURCE_ATTRIBUTES, else DefaultServiceName.
func serviceName(cfg Config) string {
	if cfg.ServiceName != "" {
		return cfg.ServiceName
	}
	for _, kv := range cfg.Resource {
		if kv.Key == "service.name" && kv.Value.AsString() != "" {
			return kv.Value.AsString()
		}
	}
	return DefaultServiceName
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// sampler is the sampler OTEL_TRACES_SAMPLER names (see Samplers; empty is
// the specification's default, parentbased_always_on).
func sampler(name string, ratio float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// Tracer returns the tracer to start spans with; nil for a nil Tracer.
func (t *Tracer) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// Dropped returns the sampled spans lost: dropped from a full queue, in a
// failed export, or left when Run's shutdown bound ran out.
func (t *Tracer) Dropped() int64 { return t.q.dropped.Load() }

// Defer runs end, which ends a span, on Run's goroutine, after the request
// that ended; false (a full queue) means it will not run and the span is
// counted as dropped. The gateway hands it to the proxy
// (proxy.Config.Spans).
func (t *Tracer) Defer(end func()) bool { return t.q.Defer(end) }

// Exported returns the spans the collector accepted.
func (t *Tracer) Exported() int64 { return t.q.exported.Load() }

// Endpoint returns where spans go, for a log line (without a password).
func (t *Tracer) Endpoint() string { return t.cfg.Endpoint.Redacted() }

// Run exports spans until ctx ends, then exports what is left within
// ShutdownTimeout, shuts the exporter and the provider down and closes its
// connections. Call it once, and end ctx only when no more spans will end
// (the gateway ends it once its traffic handlers have returned). It
// returns nil.
func (t *Tracer) Run(ctx context.Context) error {
	t.q.run(ctx)
	_ = t.provider.Shutdown(context.Background()) // the processors: no I/O
	t.client.CloseIdleConnections()
	return nil
}
