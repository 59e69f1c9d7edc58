package enginemetrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultInterval = time.Second
	DefaultMaxBytes = 4 << 20
	// staleAfter intervals without a good scrape make the reading stale.
	staleAfter = 3
	// lineBuffer bounds one line of the exposition; longer lines are
	// skipped (vLLM's longest, cache_config_info, is under 1 KiB).
	lineBuffer = 64 << 10
	// maxHeaderBytes bounds the response head on the Scraper's own
	// transport.
	maxHeaderBytes = 64 << 10
)

// Config configures a Scraper. The zero value of every field but URL has a
// meaning, given in its comment.
type Config struct {
	// URL is the engine's metrics endpoint, e.g.
	// http://127.0.0.1:8000/metrics.
	URL *url.URL
	// Interval is the time between scrapes; 0 means DefaultInterval (1s).
	Interval time.Duration
	// Timeout bounds one scrape, from sending the request to the end of
	// the body; 0 means three quarters of Interval. It must not exceed
	// Interval, so that scrapes never overlap or pile up.
	Timeout time.Duration
	// MaxBytes bounds the body read per scrape; a longer body is a
	// failure (too_large) and costs at most MaxBytes. 0 means
	// DefaultMaxBytes (4 MiB).
	MaxBytes int64
	// Transport sends the scrapes; nil means a transport of the Scraper's
	// own (no proxy, no compression, one idle connection kept 4 s, under
	// the engines' 5 s keep-alive), whose idle connections Run closes
	// when it returns. An injected transport is left as it is.
	Transport http.RoundTripper
	// Logger gets one line per change of state (see the package
	// documentation); nil means none.
	Logger *slog.Logger
	// Registerer receives the kneecap_engine_* metrics; nil means none.
	Registerer prometheus.Registerer
}

// Reading is one scrape of the engine's metrics. A value the engine does
// not publish, or published as NaN, infinite, negative or out of range, is
// NaN.
type Reading struct {
	// At is when the scrape completed.
	At time.Time
	// Engine is the family of names the exposition carried: EngineVLLM,
	// EngineSGLang or EngineLlamaCpp.
	Engine string
	// KVTokens is the KV cache in use, in tokens, as the engine counts it:
	// llama.cpp's kv_cache_tokens (cells of finished sequences kept in its
	// unified cache included), SGLang's num_used_tokens (or token_usage x
	// max_total_num_tokens), vLLM's usage x capacity (whole blocks).
	KVTokens float64
	// KVUsage is the share of the KV cache in use, 0 to 1.
	KVUsage float64
	// KVCapacity is the KV cache's size in tokens: vLLM's num_gpu_blocks
	// x block_size (vllm:cache_config_info), SGLang's
	// max_total_num_tokens; llama.cpp does not publish it.
	KVCapacity float64
	// Running and Waiting are the requests the engine runs and queues.
	Running, Waiting float64
	// Preemptions is vLLM's counter of preemptions since it started.
	Preemptions float64
	// BlockSize and Blocks are vLLM's cache geometry (the labels
	// block_size and num_gpu_blocks of vllm:cache_config_info); NaN
	// unless both are known.
	BlockSize, Blocks float64
	// LoRA is vLLM's newest vllm:lora_requests_info series; nil when the
	// engine publishes none (LoRA off, or another engine). It is never
	// changed once in a Reading.
	LoRA *LoRA
}

func unknownReading() Reading {
	n := math.NaN()
	return Reading{KVTokens: n, KVUsage: n, KVCapacity: n, Running: n, Waiting: n, Preemptions: n, BlockSize: n, Blocks: n}
}

// State is the scraper's state, as /status shows it; the failure states
// are also the reason label of kneecap_engine_scrape_errors_total.
type State string

// The states.
const (
	StateOff      State = "off"      // no scraper (a nil *Scraper)
	StateStarting State = "starting" // no scrape has completed yet
	StateOK       State = "ok"       // the last scrape gave a reading
	// StateMissing: 404, 410 or 501, the engine publishes no metrics there
	// (SGLang without --enable-metrics, llama.cpp without --metrics).
	StateMissing     State = "missing"
	StateStatus      State = "status"      // another status than 2xx
	StateUnreachable State = "unreachable" // no connection, or it broke
	StateSlow        State = "slow"        // no whole answer within Timeout
	StateTooLarge    State = "too_large"   // a body longer than MaxBytes
	StateGarbled     State = "garbled"     // no name of a known engine
	StateInvalid     State = "invalid"     // known names, no usable value
)

// FailureStates lists the states of a failed scrape.
var FailureStates = []State{StateMissing, StateStatus, StateUnreachable, StateSlow, StateTooLarge, StateGarbled, StateInvalid}

// failure is a failed scrape: its state and why.
type failure struct {
	state State
	err   error
}

func (f *failure) Error() string { return string(f.state) + ": " + f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func fail(s State, err error) error { return &failure{s, err} }

var errGarbled = errors.New("no vllm:, sglang: or llamacpp: metric in the body")

// invalidError: names of a known engine, but none of the values kneecap
// reads was usable.
type invalidError struct{ rejected int }

func (e *invalidError) Error() string {
	if e.rejected > 0 {
		return fmt.Sprintf("%d values of the metrics kneecap reads rejected (NaN, infinite, negative or out of range) and none usable", e.rejected)
	}
	return "none of the metrics kneecap reads (KV cache usage or tokens, running or waiting requests)"
}

// Scraper reads an engine's Prometheus endpoint every Interval and keeps
// the latest reading. New is passive; Run scrapes until its context ends.
// Latest and Status are safe for concurrent use, and on a nil *Scraper
// (scraping off).
type Scraper struct {
	url      string
	redacted string
	interval time.Duration
	timeout  time.Duration
	maxBytes int64
	rt       http.RoundTripper
	own      *http.Transport // the transport New made, closed by Run; nil when injected
	log      *slog.Logger
	m        *metrics // nil without a Registerer
	br       *bufio.Reader
	started  atomic.Bool

	mu        sync.Mutex
	state     State
	lastErr   string
	lastErrAt time.Time
	latest    Reading
	has       bool // latest holds a reading
	scrapes   int64
	failures  int64
	logs      logLimiter
}

// New checks cfg and returns a passive Scraper: nothing runs until Run.
func New(cfg Config) (*Scraper, error) {
	u := cfg.URL
	if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("enginemetrics: the URL must be an absolute http(s) URL")
	}
	s := &Scraper{
		url: u.String(), redacted: u.Redacted(),
		interval: cfg.Interval, timeout: cfg.Timeout, maxBytes: cfg.MaxBytes,
		rt: cfg.Transport, log: cfg.Logger, state: StateStarting, latest: unknownReading(),
	}
	switch {
	case s.interval < 0:
		return nil, errors.New("enginemetrics: the interval must not be negative")
	case s.interval == 0:
		s.interval = DefaultInterval
	case s.interval < 10*time.Millisecond:
		return nil, errors.New("enginemetrics: the interval must be at least 10ms")
	}
	switch {
	case s.timeout < 0:
		return nil, errors.New("enginemetrics: the timeout must not be negative")
	case s.timeout == 0:
		s.timeout = s.interval * 3 / 4
	case s.timeout > s.interval:
		return nil, fmt.Errorf("enginemetrics: the timeout (%v) must not exceed the interval (%v)", s.timeout, s.interval)
	}
	switch {
	case s.maxBytes < 0:
		return nil, errors.New("enginemetrics: the byte bound must not be negative")
	case s.maxBytes == 0:
		s.maxBytes = DefaultMaxBytes
	}
	if s.rt == nil {
		s.own = &http.Transport{
			Proxy:                  nil, // the engine is local; never via HTTP_PROXY
			DialContext:            (&net.Dialer{Timeout: s.timeout}).DialContext,
			MaxIdleConnsPerHost:    1,
			IdleConnTimeout:        4 * time.Second,
			DisableCompression:     true,
			MaxResponseHeaderBytes: maxHeaderBytes,
		}
		s.rt = s.own
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.logs = logLimiter{tokens: logBurst, logged: StateStarting}
	if cfg.Registerer != nil {
		m, err := newMetrics(cfg.Registerer, s)
		if err != nil {
			return nil, err
		}
		s.m = m
	}
	s.br = bufio.NewReaderSize(nil, lineBuffer)
	return s, nil
}

// Interval returns the time between scrapes.
func (s *Scraper) Interval() time.Duration { return s.interval }

// Run scrapes at once and then every Interval until ctx ends, and returns
// nil then, after the scrape in progress (cut by ctx) and, with the
// Scraper's own transport, after closing its idle connection. A scrape
// never outlives its Timeout, and the next starts only after it ended.
// Run may be called once.
func (s *Scraper) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("enginemetrics: Run called twice")
	}
	if s.own != nil {
		defer s.own.CloseIdleConnections()
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.once(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// once makes one scrape and records its outcome.
func (s *Scraper) once(ctx context.Context) {
	start := time.Now()
	r, err := s.scrape(ctx)
	if ctx.Err() != nil {
		return // stopping: not the engine's failure
	}
	now := time.Now()
	state := StateOK
	var f *failure
	if errors.As(err, &f) {
		state = f.state
	} else if err != nil {
		state = StateUnreachable
	}
	if s.m != nil {
		s.m.observe(now.Sub(start), state)
	}
	s.mu.Lock()
	s.scrapes++
	if err != nil {
		s.failures++
		s.lastErr, s.lastErrAt = err.Error(), now
	} else {
		r.At = now
		s.latest, s.has = r, true
	}
	s.state = state
	line, ok := s.logs.next(now, state)
	s.mu.Unlock()
	if ok {
		s.logChange(line, r, err)
	}
}

// scrape sends one request and reads its answer within the timeout.
func (s *Scraper) scrape(ctx context.Context) (Reading, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return Reading{}, fail(StateUnreachable, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	req.Header.Set("User-Agent", "kneecap-enginemetrics")
	resp, err := s.rt.RoundTrip(req)
	if err != nil {
		return Reading{}, s.ioError(ctx, err)
	}
	defer func() { _ = resp.Body.Close() }() // unread bytes are not drained: the connection is closed
	switch c := resp.StatusCode; {
	case c == http.StatusNotFound || c == http.StatusGone || c == http.StatusNotImplemented:
		return Reading{}, fail(StateMissing, errors.New(resp.Status))
	case c < 200 || c > 299:
		return Reading{}, fail(StateStatus, errors.New(resp.Status))
	}
	body := &limited{r: resp.Body, left: s.maxBytes + 1}
	s.br.Reset(body)
	var p parser
	err = p.parse(s.br)
	s.br.Reset(nil) // keep no reference to the body
	if err != nil {
		return Reading{}, s.ioError(ctx, err)
	}
	if body.read > s.maxBytes {
		return Reading{}, fail(StateTooLarge, fmt.Errorf("the body is longer than %d bytes", s.maxBytes))
	}
	r, err := p.reading()
	switch {
	case errors.Is(err, errGarbled):
		return r, fail(StateGarbled, err)
	case err != nil:
		return r, fail(StateInvalid, err)
	}
	return r, nil
}

// ioError classifies an error of the connection: slow when the scrape's
// own timeout passed, unreachable otherwise.
func (s *Scraper) ioError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fail(StateSlow, fmt.Errorf("no whole answer within %v", s.timeout))
	}
	return fail(StateUnreachable, err)
}

// limited reads at most left bytes of r and counts what it read.
type limited struct {
	r    io.Reader
	left int64
	read int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	l.read += int64(n)
	return n, err
}

// Latest returns the newest reading; ok is true only if it is fresh, taken
// within the last three intervals. Without any reading it returns one of
// NaNs. On a nil Scraper it returns (a reading of NaNs, false).
func (s *Scraper) Latest() (Reading, bool) {
	if s == nil {
		return unknownReading(), false
	}
	s.mu.Lock()
	r, has := s.latest, s.has
	s.mu.Unlock()
	return r, has && time.Since(r.At) < staleAfter*s.interval
}
