package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Mode is how load is generated.
type Mode int

const (
	// Closed is a closed loop: each of Level users sends its next request when
	// its previous one ended.
	Closed Mode = iota
	// Open is an open loop: requests arrive at Level requests per second,
	// whether or not earlier ones have ended.
	Open
)

func (m Mode) String() string {
	if m == Open {
		return "rate"
	}
	return "concurrency"
}

// Endpoint is the API a request is sent to.
type Endpoint int

const (
	// Chat is POST /v1/chat/completions with one user message.
	Chat Endpoint = iota
	// Completions is POST /v1/completions with a text prompt.
	Completions
)

func (e Endpoint) path() string {
	if e == Completions {
		return "/v1/completions"
	}
	return "/v1/chat/completions"
}

// Targets are latency bounds; a zero field is not checked. A request is good
// when it completed and met every set bound at once.
type Targets struct {
	TTFT time.Duration
	TPOT time.Duration
	E2E  time.Duration
}

// IsZero reports whether no bound is set.
func (t Targets) IsZero() bool { return t == Targets{} }

func (t Targets) String() string {
	var parts []string
	if t.TTFT > 0 {
		parts = append(parts, "ttft="+t.TTFT.String())
	}
	if t.TPOT > 0 {
		parts = append(parts, "tpot="+t.TPOT.String())
	}
	if t.E2E > 0 {
		parts = append(parts, "e2e="+t.E2E.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// ParseTargets reads "ttft=1s,tpot=100ms[,e2e=20s]" (a bare number is
// milliseconds, as in vLLM's --goodput). "none" sets no bound.
func ParseTargets(s string) (Targets, error) {
	var t Targets
	if s == "" || s == "none" {
		return t, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			k, v, ok = strings.Cut(kv, ":")
		}
		if !ok {
			return t, fmt.Errorf("goodput %q: want key=duration", kv)
		}
		d, err := parseDurationMS(v)
		if err != nil || d <= 0 {
			return t, fmt.Errorf("goodput %s: bad duration %q", k, v)
		}
		switch strings.ToLower(k) {
		case "ttft":
			t.TTFT = d
		case "tpot":
			t.TPOT = d
		case "e2e", "e2el":
			t.E2E = d
		default:
			return t, fmt.Errorf("goodput: unknown target %q (want ttft, tpot, e2e)", k)
		}
	}
	return t, nil
}

func parseDurationMS(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(f * float64(time.Millisecond)), nil
	}
	return time.ParseDuration(v)
}

// ParseLevels reads a comma-separated list of positive numbers.
func ParseLevels(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("level %q: want a positive number", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("no levels given")
	}
	return out, nil
}

// Dist is a distribution of token counts, drawn with a seeded *rand.Rand.
// The zero value always draws 0.
type Dist struct {
	Kind DistKind
	// Mean is the fixed value (Fixed), the centre (Uniform, Normal), the
	// mean (Exponential) or the median (LogNormal).
	Mean int
	// Spread is the half-width of Uniform as a share of Mean (vLLM's
	// --random-range-ratio), the standard deviation of Normal as a share of
	// Mean, or the standard deviation of LogNormal's natural log (sigma:
	// 1 is ShareGPT-like, most values near the median and some ten times
	// it).
	Spread float64
}

// DistKind names the shape of a Dist.
type DistKind int

// The shapes of Dist.
const (
	Fixed DistKind = iota
	Uniform
	Normal
	Exponential
	LogNormal
)

// Draw returns one value, at least 1 unless Mean is 0.
func (d Dist) Draw(r *rand.Rand) int {
	if d.Mean <= 0 {
		return 0
	}
	m := float64(d.Mean)
	var v float64
	switch d.Kind {
	case Uniform:
		lo, hi := m*(1-d.Spread), m*(1+d.Spread)
		v = lo + r.Float64()*(hi-lo)
	case Normal:
		v = m + r.NormFloat64()*d.Spread*m
	case Exponential:
		v = r.ExpFloat64() * m
	case LogNormal:
		v = m * math.Exp(d.Spread*r.NormFloat64())
	default:
		return d.Mean
	}
	return max(1, int(v+0.5))
}

func (d Dist) String() string {
	switch d.Kind {
	case Uniform:
		return fmt.Sprintf("%d±%g%%", d.Mean, d.Spread*100)
	case Normal:
		return fmt.Sprintf("normal:%d,%g", d.Mean, d.Spread)
	case Exponential:
		return fmt.Sprintf("exp:%d", d.Mean)
	case LogNormal:
		return fmt.Sprintf("lognormal:%d,%g", d.Mean, d.Spread)
	}
	return strconv.Itoa(d.Mean)
}

// ParseDist reads "N" (fixed), "N±R" or "N:R" (uniform within N*(1±R)),
// "A-B" (uniform from A to B), "normal:N,R" (standard deviation R*N),
// "exp:N" (exponential with mean N) or "lognormal:N,S" (median N, the
// natural log's standard deviation S: heavy-tailed, as ShareGPT's lengths).
func ParseDist(s string) (Dist, error) {
	bad := fmt.Errorf("length %q: want N, N:ratio, A-B, normal:N,ratio, exp:N or lognormal:N,sigma", s)
	atoi := func(v string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		return n, err == nil && n > 0
	}
	ratio := func(v string) (float64, bool) {
		f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "%"), 64)
		if strings.HasSuffix(v, "%") {
			f /= 100
		}
		return f, err == nil && f >= 0
	}
	if rest, ok := strings.CutPrefix(s, "exp:"); ok {
		n, ok := atoi(rest)
		if !ok {
			return Dist{}, bad
		}
		return Dist{Kind: Exponential, Mean: n}, nil
	}
	for prefix, kind := range map[string]DistKind{"normal:": Normal, "lognormal:": LogNormal} {
		if rest, ok := strings.CutPrefix(s, prefix); ok {
			a, b, _ := strings.Cut(rest, ",")
			n, ok1 := atoi(a)
			r, ok2 := ratio(b)
			if !ok1 || !ok2 {
				return Dist{}, bad
			}
			return Dist{Kind: kind, Mean: n, Spread: r}, nil
		}
	}
	for _, sep := range []string{"±", ":"} {
		if a, b, ok := strings.Cut(s, sep); ok {
			n, ok1 := atoi(a)
			r, ok2 := ratio(b)
			if !ok1 || !ok2 || r > 1 {
				return Dist{}, bad
			}
			return Dist{Kind: Uniform, Mean: n, Spread: r}, nil
		}
	}
	if a, b, ok := strings.Cut(s, "-"); ok {
		lo, ok1 := atoi(a)
		hi, ok2 := atoi(b)
		if !ok1 || !ok2 || hi < lo {
			return Dist{}, bad
		}
		mid := float64(lo+hi) / 2
		return Dist{Kind: Uniform, Mean: int(mid + 0.5), Spread: (float64(hi) - mid) / mid}, nil
	}
	n, ok := atoi(s)
	if !ok {
		return Dist{}, bad
	}
	return Dist{Kind: Fixed, Mean: n}, nil
}

// Config is one benchmark run. The zero value of every optional field is
// usable; BaseURL, Levels and either Duration or Requests are required.
type Config struct {
	// BaseURL is the server's base URL without /v1, as vLLM's client takes it
	// (http://127.0.0.1:8000). Nothing else is contacted.
	BaseURL string
	// Endpoint is the API used; the zero value is Chat.
	Endpoint Endpoint
	// Model is sent as the request's model field.
	Model string
	// Client sends every request; nil means a client with no proxy and
	// enough idle connections for the highest level. Inject one to run over
	// net.Pipe inside a testing/synctest bubble.
	Client *http.Client
	// Header is added to every request (for example Authorization).
	Header http.Header

	// Mode and Levels: concurrencies (Closed) or rates in requests/s (Open).
	Mode   Mode
	Levels []float64
	// Burstiness is the shape of the gamma distribution of inter-arrival
	// times in open loop, as vLLM's --burstiness: 1 (or 0) is Poisson,
	// below 1 burstier, above 1 more regular.
	Burstiness float64
	// Constant makes open-loop arrivals evenly spaced, ignoring Burstiness.
	Constant bool
	// Interarrival, when set, replaces the built-in arrivals in open loop: it
	// returns the gap before the next request, given the level's rate and
	// the time since the level started (for on/off bursts and the like). A
	// negative gap ends the level's arrivals.
	Interarrival func(r *rand.Rand, rate float64, elapsed time.Duration) time.Duration
	// CapURL, when set, is the gateway's /status (its admin port), read
	// about once a second for its cap ("limit") while a level runs, with
	// Client: Level.Caps, drawn over time by the timeline (Level.Timeline).
	// A reading that fails is skipped.
	CapURL string
	// EndWithArrivals ends an open-loop level once Interarrival has ended
	// its arrivals (a negative gap) and every request sent has ended (a
	// trace's replay: the window is its whole run), before Duration.
	EndWithArrivals bool
	// MaxInFlight bounds requests in flight in open loop; an arrival over the
	// bound waits for a free slot, and its latencies still count from when it
	// was due. Zero means 10000.
	MaxInFlight int

	// RampUp spreads the start of closed-loop users evenly over this long
	// (user u starts after u/users of it), so that they do not run in
	// lockstep; zero starts them all at once, as vLLM's benchmark does.
	RampUp time.Duration
	// Think is how long a closed-loop user waits after a completed request
	// before it sends the next; zero means not at all.
	Think time.Duration
	// Warmup runs each level's load this long before its measured window.
	Warmup time.Duration
	// Duration is the length of each level's measured window; zero means
	// until Requests requests ended in it.
	Duration time.Duration
	// Requests ends a level's window once this many requests ended in it;
	// zero means Duration alone.
	Requests int
	// Timeout bounds the whole run; when it passes, the level running is cut
	// short and reported, and Run returns with ErrTimeout. Zero means none
	// beyond ctx.
	Timeout time.Duration
	// RequestTimeout bounds one request; zero means none beyond the level.
	RequestTimeout time.Duration

	// Workload chooses what each request sends; nil means Synthetic with 128
	// input and 128 output tokens.
	Workload Workload
	// Seed makes the workload and the arrivals repeatable.
	Seed uint64
	// IgnoreEOS asks the engine to generate exactly max_tokens (vLLM, SGLang
	// and the simulator support it).
	IgnoreEOS bool

	// NoStream sends every request with "stream": false (see
	// Request.NoStream, which does it for one request).
	NoStream bool

	// Targets judge goodput; a Request may carry its own. A request that
	// is not streamed is judged by E2E alone (see Record.Judge).
	Targets Targets
	// MinAttainment is the share of good requests a level needs to count as
	// having met the targets in the knee line; zero means 0.9.
	MinAttainment float64

	// Clients is what closed-loop users do with a refused or failed
	// request: ClientsNext (the zero value) drops it and sends the next
	// after RetryAfterMax at most; ClientsSDK retries it as the OpenAI
	// SDKs do; ClientsNone gives up at once (see Clients). In open loop
	// ClientsSDK retries the same way and ClientsNone marks a refused or
	// failed request given up; ClientsNext sends each request once.
	Clients Clients
	// RetryAfterMax makes closed-loop users (ClientsNext) that got a 429 or
	// 503 wait the server's Retry-After, at most this long, before their
	// next request. Zero means they do not wait.
	RetryAfterMax time.Duration
	// RetryThink is added to every pause after a refusal, and a
	// nanosecond per user (user u waits RetryThink + u ns more). In a
	// synctest bubble it keeps a user's return off the instants the
	// server armed its own timers for at the refusal (the instant plus
	// whole seconds, as Retry-After is), and users refused at one instant
	// (told whole seconds alike) from returning at one instant: where
	// which goroutine runs first would decide the outcome.
	RetryThink time.Duration

	// Progress, when set, is called from Run's goroutine about once a second
	// (and at each level's end) with the state of the level running.
	Progress func(Progress)
}

// Progress is the state of a running level.
type Progress struct {
	Level, Levels int // index of the level (0-based) and their number
	Value         float64
	Phase         string // "warmup", "measure" or "done"
	Elapsed       time.Duration
	Done, Total   int // requests ended in the window, and Config.Requests
	Window        time.Duration
	Good          int
}

// ErrTimeout is returned (wrapped) when Config.Timeout cut the run short.
var ErrTimeout = errors.New("bench: overall time bound reached")

func (c *Config) validate() error {
	if c.BaseURL == "" {
		return errors.New("bench: no base URL")
	}
	if len(c.Levels) == 0 {
		return errors.New("bench: no levels")
	}
	for _, l := range c.Levels {
		if l <= 0 {
			return fmt.Errorf("bench: level %g is not positive", l)
		}
		if c.Mode == Closed && l != float64(int(l)) {
			return fmt.Errorf("bench: concurrency %g is not a whole number", l)
		}
	}
	if c.Duration <= 0 && c.Requests <= 0 {
		return errors.New("bench: set a duration or a request count per level")
	}
	if c.Burstiness < 0 {
		return errors.New("bench: burstiness must be positive")
	}
	return nil
}
