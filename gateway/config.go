package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/tracing"
)

// EnvPrefix is the prefix of every environment variable the gateway reads.
const EnvPrefix = "KNEECAP_"

// DefaultMaxConcurrency is the static cap used when KNEECAP_MAX_CONCURRENCY
// is unset (or 0) and no controller sets the cap: a deliberately low
// placeholder (the knee of the brief's BF16 engine was 4, of its FP8 one
// 16). Set the variable for your engine; the adaptive controller replaces
// this default.
const DefaultMaxConcurrency = 8

// Config is the gateway's configuration, read from KNEECAP_* environment
// variables by ConfigFromEnv (names in the env tags, without the prefix).
type Config struct {
	// Upstream is the engine's base URL, e.g. http://127.0.0.1:8000.
	Upstream *url.URL `env:"UPSTREAM,required"`
	// Listen is the traffic listener's address; AdminListen the admin
	// listener's (/metrics, /healthz, /readyz, /status).
	Listen      string `env:"LISTEN" envDefault:":8080"`
	AdminListen string `env:"ADMIN_LISTEN" envDefault:":9090"`

	// SLOTTFT, SLOTPOT and SLOE2E are the operator's targets; zero means
	// unset. Requests may override them with x-slo-*-ms headers.
	SLOTTFT time.Duration `env:"SLO_TTFT" envDefault:"1s"`
	SLOTPOT time.Duration `env:"SLO_TPOT" envDefault:"100ms"`
	SLOE2E  time.Duration `env:"SLO_E2E"`
	// SLOWindow is the length of the sliding window of statistics.
	SLOWindow time.Duration `env:"SLO_WINDOW" envDefault:"60s"`

	// MaxConcurrency caps generation requests running on the engine. Zero
	// means unset: DefaultMaxConcurrency, or the controller's choice when
	// one is wired in.
	MaxConcurrency int `env:"MAX_CONCURRENCY"`
	// MaxQueue bounds the requests waiting for a slot; 0 means no queue.
	MaxQueue int `env:"MAX_QUEUE" envDefault:"1024"`
	// MaxQueueWait bounds a request's time in the queue, unless its class
	// sets its own wait (see ParseClasses); zero means the request's own
	// TTFT target, or its E2E target when it has no TTFT target (it would
	// miss it anyway), and the adaptive controller refuses at once a
	// request predicted to miss its TTFT target. Set longer than a
	// request's TTFT target, the bound wins: the request may wait up to it
	// (missing its first-token target rather than being refused, for
	// clients that cannot retry), and is refused at once only when
	// predicted to wait longer.
	MaxQueueWait time.Duration `env:"MAX_QUEUE_WAIT"`
	// MaxRetryAfter bounds the Retry-After of a refusal. The OpenAI SDKs
	// wait a server's Retry-After only up to 60 s (beyond it they back off
	// for about a second and retry): a client told the bound comes back
	// then and is told its remaining wait. Zero means no bound.
	MaxRetryAfter time.Duration `env:"MAX_RETRY_AFTER" envDefault:"60s"`
	// FirstTokenTimeout bounds forwarding to first output of a streamed
	// request (504, or an SSE error event after headers); 0 disables it.
	FirstTokenTimeout time.Duration `env:"FIRST_TOKEN_TIMEOUT" envDefault:"60s"`
	// ResponseTimeout bounds forwarding to the response headers of a
	// request that is not streamed (engines answer it when the whole
	// generation is done): 504 beyond it; 0 disables it.
	ResponseTimeout time.Duration `env:"RESPONSE_TIMEOUT" envDefault:"10m"`
	// StreamIdleTimeout bounds the silence of an engine's response once its
	// headers arrived (an SSE error event, or 504 before anything was
	// sent); 0 disables it.
	StreamIdleTimeout time.Duration `env:"STREAM_IDLE_TIMEOUT" envDefault:"60s"`
	// ClientWriteTimeout bounds each write to a client: one that takes no
	// bytes for that long is cut off and its slot freed; 0 disables it.
	ClientWriteTimeout time.Duration `env:"CLIENT_WRITE_TIMEOUT" envDefault:"30s"`
	// UpstreamIdleTimeout is how long an idle connection to the engine is
	// kept for reuse: under the engines' own keep-alive (5 s in uvicorn as
	// vLLM and SGLang run it, and in llama.cpp's cpp-httplib), so that the
	// gateway lets a connection go before the engine closes it. 0 means a
	// new connection for every request.
	UpstreamIdleTimeout time.Duration `env:"UPSTREAM_IDLE_TIMEOUT" envDefault:"4s"`
	// ClientHeaderTimeout bounds reading a request's headers,
	// ClientReadTimeout reading a whole request (headers and body), and
	// ClientIdleTimeout how long a client's connection may wait for its next
	// request, or for its first (the header timeout runs from a request's
	// first byte; see firstbyte.go). They bound what a client that sends slowly, or
	// promises bytes it never sends, can hold. Zero means no bound (as in
	// net/http; a zero header timeout falls back to the read timeout).
	ClientHeaderTimeout time.Duration `env:"CLIENT_HEADER_TIMEOUT" envDefault:"10s"`
	ClientReadTimeout   time.Duration `env:"CLIENT_READ_TIMEOUT" envDefault:"60s"`
	ClientIdleTimeout   time.Duration `env:"CLIENT_IDLE_TIMEOUT" envDefault:"120s"`
	// MaxBodyBytes bounds a generation request body (413 beyond it).
	MaxBodyBytes int64 `env:"MAX_BODY_BYTES" envDefault:"16777216"`
	// MaxBodyBytesTotal bounds the request body bytes held at once across
	// every request being read, queued or running (429 body_budget beyond
	// it, before more of a body is read).
	MaxBodyBytesTotal int64 `env:"MAX_BODY_BYTES_TOTAL" envDefault:"268435456"`
	// PassthroughPaths opens paths outside the routing table (engine admin
	// routes, say) on the traffic port: relayed as they are, never
	// admitted. Comma-separated; a trailing * opens a prefix.
	PassthroughPaths []string `env:"PASSTHROUGH_PATHS"`
	// SLOHeaders says what x-slo-*-ms headers may do: any (tighten or
	// loosen), tighten (only tighten), off (ignored). SLOHeaderFloor* are
	// the lowest bounds a header may set; a lower value is raised to them.
	SLOHeaders         string        `env:"SLO_HEADERS" envDefault:"any"`
	SLOHeaderFloorTTFT time.Duration `env:"SLO_HEADER_FLOOR_TTFT" envDefault:"100ms"`
	SLOHeaderFloorTPOT time.Duration `env:"SLO_HEADER_FLOOR_TPOT" envDefault:"5ms"`
	SLOHeaderFloorE2E  time.Duration `env:"SLO_HEADER_FLOOR_E2E" envDefault:"500ms"`
	// DrainTimeout bounds how long running streams may finish after
	// SIGTERM before they are cut.
	DrainTimeout time.Duration `env:"DRAIN_TIMEOUT" envDefault:"30s"`
	// UpstreamHealthPath is probed by /readyz.
	UpstreamHealthPath string `env:"UPSTREAM_HEALTH_PATH" envDefault:"/health"`
	// EngineMetrics is where the engine publishes its Prometheus metrics,
	// read every EngineMetricsInterval for its own KV-cache occupancy
	// (package enginemetrics): a path on the upstream (a query too, as
	// llama.cpp's router mode needs ?model=), an absolute http(s) URL, or
	// off. Empty, in a Config built in code, means off.
	EngineMetrics string `env:"ENGINE_METRICS" envDefault:"/metrics"`
	// EngineMetricsInterval is the time between scrapes (each is cut at
	// three quarters of it); 0 means 1s.
	EngineMetricsInterval time.Duration `env:"ENGINE_METRICS_INTERVAL" envDefault:"1s"`

	// EPPMetrics, when vllm or sglang, has the traffic port answer GET
	// /metrics itself, for an endpoint picker (Gateway API Inference
	// Extension) that scrapes the pod's serving port with its defaults:
	// the engine's own metrics with its waiting and running requests
	// replaced by kneecap's view in that family's names (package
	// eppmetrics). off: /metrics is relayed to the engine unchanged. The
	// view's kneecap_epp_* series are on the admin port either way.
	EPPMetrics string `env:"EPP_METRICS" envDefault:"off"`
	// EPPSaturatedWaiting is the least waiting the view reports while
	// kneecap refuses or drains (saturated, not broken): the endpoint
	// picker's queue-depth threshold, so that its saturation detector
	// reads the pod as full; 0: no floor.
	EPPSaturatedWaiting int `env:"EPP_SATURATED_WAITING" envDefault:"5"`

	// RefusalStatus is the status of a refusal that is not a drain: 429,
	// or 503 for a load balancer that can retry a 503 on another replica
	// but not a 429 (HAProxy 2.6: retry-on takes no 429); the balancer
	// then turns the last replica's 503 back into a 429 for the client
	// (docs/fleet.md). The reason and Retry-After are the same.
	RefusalStatus int `env:"REFUSAL_STATUS" envDefault:"429"`
	// AgentListen, when set, serves HAProxy's agent-check protocol on this
	// address (see agent.go): one line per connection with the replica's
	// state and its cap as a weight. Empty: off.
	AgentListen string `env:"AGENT_LISTEN"`

	// SLOPercentile, MinCap and MaxCap are for the adaptive controller: the
	// share of requests that must meet the targets at the chosen cap
	// (in (0, 1)), and the bounds of the cap it may set (MaxCap 0 means
	// control.DefaultMaxCap). The static cap ignores them. They are read
	// and checked here only; New hands them to the controller.
	SLOPercentile float64 `env:"SLO_PERCENTILE" envDefault:"0.9"`
	MinCap        int     `env:"MIN_CAP" envDefault:"1"`
	MaxCap        int     `env:"MAX_CAP"`
	// InitialCap is the adaptive controller's cap before it has measured
	// anything (0: MinCap), say the engine's known knee or a fraction of
	// its slot count; the controller moves it as soon as it learns.
	// Ignored with MaxConcurrency set.
	InitialCap int `env:"INITIAL_CAP"`
	// StateFile, when set, is where the adaptive controller keeps what it
	// learnt across restarts (package learnt): written atomically every
	// 30 s and at the end, read at start, where a fresh state learnt on
	// the same engine and targets replaces InitialCap. A missing, stale
	// (older than StateMaxAge), foreign or corrupt file is one log line
	// and a cold start.
	StateFile   string        `env:"STATE_FILE"`
	StateMaxAge time.Duration `env:"STATE_MAX_AGE" envDefault:"24h"`
	// PrefillPacing lets the controller pace prefills (a static cap too):
	// a slot is granted only while fewer than k admitted requests wait for
	// their first token (see admission.Limiter.SetPacing).
	PrefillPacing bool `env:"PREFILL_PACING" envDefault:"true"`
	// TokenBudget lets the controller hand the limiter its model of the
	// engine's costs in tokens (a static cap too): a request is granted a
	// slot only while its prefill, after those under way, meets its TTFT
	// deadline without pushing theirs past, and the decode step with it
	// meets the TPOT target (see admission.Limiter.SetCosts). false keeps
	// the budget in requests only.
	TokenBudget bool `env:"TOKEN_BUDGET" envDefault:"true"`
	// DecodeStep learns the decode step only from chunk gaps with no
	// prefill under way, with the token budget (see
	// control.ControllerConfig.DecodeStep). Off by default.
	DecodeStep bool `env:"DECODE_STEP" envDefault:"false"`
	// CachedCost charges a prompt's prefill as its uncached part: the
	// token model learns from the engine's usage count less the cached
	// tokens it reports, and admission charges a prompt estimate less the
	// share of recent prompt tokens the engine's prefix cache served (see
	// proxy.Config.NoCachedCost). false charges every prompt token.
	CachedCost bool `env:"CACHED_COST" envDefault:"true"`
	// MaxModelLen is the engine's context length in tokens: a request
	// whose prompt is estimated beyond it gets the engine's 400 before it
	// queues (see proxy.Config.MaxModelLen). 0: no check.
	MaxModelLen int `env:"MAX_MODEL_LEN"`

	// Classes are the priority classes, highest first (see ParseClasses);
	// empty means one class with the operator's targets. DefaultClass
	// takes requests that name no class or an unknown one (empty: the
	// lowest class). ClassHeader names the class of a request.
	Classes      string `env:"CLASSES"`
	DefaultClass string `env:"DEFAULT_CLASS"`
	ClassHeader  string `env:"CLASS_HEADER" envDefault:"x-kneecap-class"` // empty: none
	// TenantHeader names a request's tenant; empty (or the header absent)
	// means the hash of its API key (Authorization: Bearer). Tenants sets
	// weights and default classes (see ParseTenants).
	TenantHeader string `env:"TENANT_HEADER"`
	Tenants      string `env:"TENANTS"`
	// FairPromptWeight and FairOutputWeight price a token served in a
	// tenant's fair share (both 0: 1 each); MaxTenants bounds the tenants
	// tracked (0: admission.DefaultMaxTenants);
	// TenantMetrics is how many tenants (the most served) get their own
	// metric labels and /status entry, the rest "other".
	FairPromptWeight float64 `env:"FAIR_PROMPT_WEIGHT" envDefault:"1"`
	FairOutputWeight float64 `env:"FAIR_OUTPUT_WEIGHT" envDefault:"2"`
	MaxTenants       int     `env:"MAX_TENANTS" envDefault:"4096"`
	TenantMetrics    int     `env:"TENANT_METRICS" envDefault:"10"`

	// RequestLog is the file of the request log (package reqlog): one
	// JSON line per generation request, replayable with `kneecap bench
	// --trace`; empty: off. RequestLogMaxBytes bounds each file (0:
	// reqlog.DefaultMaxBytes), RequestLogFiles is how many rotated files
	// are kept beside it, RequestLogBuffer how many finished requests may
	// wait for the writer before more are dropped (0:
	// reqlog.DefaultBuffer).
	RequestLog         string `env:"REQUEST_LOG"`
	RequestLogMaxBytes int64  `env:"REQUEST_LOG_MAX_BYTES" envDefault:"104857600"`
	RequestLogFiles    int    `env:"REQUEST_LOG_FILES" envDefault:"4"`
	RequestLogBuffer   int    `env:"REQUEST_LOG_BUFFER" envDefault:"4096"`

	// LogLevel is debug, info, warn or error; LogFormat text or json.
	LogLevel  slog.Level `env:"LOG_LEVEL" envDefault:"info"`
	LogFormat string     `env:"LOG_FORMAT" envDefault:"text"`

	// Tracing is OpenTelemetry tracing, read from the standard OTEL_*
	// variables (gateway/tracing.go); the zero value is off.
	Tracing tracing.Config `env:"-"`
}

// Targets returns the operator's targets.
func (c Config) Targets() slo.Targets {
	return slo.Targets{TTFT: c.SLOTTFT, TPOT: c.SLOTPOT, E2E: c.SLOE2E}
}

// HeaderPolicy returns what x-slo-*-ms headers may do to a request's
// targets. SLOHeaders must have passed Validate; empty means any.
func (c Config) HeaderPolicy() slo.HeaderPolicy {
	mode, _ := slo.ParseHeaderMode(c.SLOHeaders)
	return slo.HeaderPolicy{Mode: mode, Floor: slo.Targets{TTFT: c.SLOHeaderFloorTTFT, TPOT: c.SLOHeaderFloorTPOT, E2E: c.SLOHeaderFloorE2E}}
}

// Limit returns the static cap: MaxConcurrency, or DefaultMaxConcurrency
// when unset.
func (c Config) Limit() int {
	if c.MaxConcurrency > 0 {
		return c.MaxConcurrency
	}
	return DefaultMaxConcurrency
}

// SettingError is a bad configuration value. Its message is one line that
// names the environment variable.
type SettingError struct {
	Var string // e.g. "KNEECAP_SLO_TTFT"
	Err error
}

func (e *SettingError) Error() string { return e.Var + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// ConfigFromEnv reads the configuration from environ (as os.Environ
// returns it). A missing or malformed value is a *SettingError naming the
// variable (the first one, if several are wrong).
func ConfigFromEnv(environ []string) (Config, error) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	var c Config
	err := env.ParseWithOptions(&c, env.Options{Prefix: EnvPrefix, Environment: m})
	if err != nil {
		return c, settingError(err)
	}
	if c.Tracing, err = tracingFromEnv(m); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// settingError turns the first error of caarlos0/env into a SettingError.
func settingError(err error) error {
	var agg env.AggregateError
	if errors.As(err, &agg) && len(agg.Errors) > 0 {
		err = agg.Errors[0]
	}
	var pe env.ParseError
	var ns env.VarIsNotSetError
	var ev env.EmptyVarError
	switch {
	case errors.As(err, &pe):
		return &SettingError{Var: varOf(pe.Name), Err: fmt.Errorf("cannot parse as %s: %w", typeName(pe.Type), unwrapAll(pe.Err))}
	case errors.As(err, &ns):
		return &SettingError{Var: ns.Key, Err: errors.New("required but not set")}
	case errors.As(err, &ev):
		return &SettingError{Var: ev.Key, Err: errors.New("must not be empty")}
	}
	return err
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

func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[time.Duration]():
		return "a duration (e.g. 500ms, 2s)"
	case reflect.TypeFor[*url.URL]():
		return "a URL"
	case reflect.TypeFor[slog.Level]():
		return "a log level (debug, info, warn, error)"
	}
	if t.Kind() == reflect.Float64 {
		return "a number"
	}
	return "an " + t.String()
}

// varOf maps a Config field name to its environment variable.
func varOf(field string) string {
	if f, ok := reflect.TypeFor[Config]().FieldByName(field); ok {
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		return EnvPrefix + name
	}
	return field
}
