package eppmetrics

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/kneecap/kneecap/enginemetrics"
)

// Defaults of HandlerConfig.
const (
	DefaultTimeout  = 2 * time.Second
	DefaultMaxBytes = 4 << 20
	// lineBuffer bounds a line passed through; a longer one is left out
	// (vLLM's longest, cache_config_info, is under 1 KiB).
	lineBuffer = 64 << 10
	// maxFetches bounds the engine fetches under way at once: the route is
	// on the traffic port, where anyone may ask it, and each fetch holds a
	// connection to the engine and a lineBuffer. A picker scrapes a pod
	// every 50 ms, one scrape at a time; a request beyond the bound gets
	// the view's series alone, as when the engine fails.
	maxFetches = 4
)

// HandlerConfig configures the handler of the traffic port's /metrics in an
// engine's names.
type HandlerConfig struct {
	// Names is the family written: VLLM or SGLang.
	Names Names
	// Engine is the engine's own metrics endpoint, whose body is passed
	// through with the Waiting and Running series replaced by the view's;
	// nil means none (only the view's series are written).
	Engine *url.URL
	// Transport fetches the engine's body; nil means
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Timeout bounds the fetch; 0 means DefaultTimeout. Past it, or on
	// any failure of the engine, the view's series are written alone.
	Timeout time.Duration
	// MaxBytes bounds the engine's body passed through; 0 means
	// DefaultMaxBytes. A longer body is cut at the last whole line, and
	// only whole lines are ever passed, so the answer always parses.
	MaxBytes int64
}

// Handler returns the handler of GET and HEAD /metrics on the traffic port
// in an engine's names, for an endpoint picker that scrapes the pod's
// serving port with its defaults: the engine's own exposition, each line as
// it came, except the series of cfg.Names.Waiting and Running (samples,
// HELP and TYPE), which are the view's; the KV usage is the engine's own,
// written from the view's reading only when the body has none. The
// engine's failure is no failure here: the view's series are answered
// alone, so that a pod whose engine is slow to publish still reads as
// there.
func (v *View) Handler(cfg HandlerConfig) http.Handler {
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	return &handler{v: v, cfg: cfg, fetches: make(chan struct{}, maxFetches)}
}

type handler struct {
	v       *View
	cfg     HandlerConfig
	fetches chan struct{} // a token per engine fetch under way (maxFetches)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	sawKV := h.passEngine(r.Context(), bw)
	h.writeView(bw, sawKV)
	_ = bw.Flush()
}

// passEngine copies the engine's body to w without the replaced series and
// reports whether it carried a KV usage series of the family.
func (h *handler) passEngine(ctx context.Context, w *bufio.Writer) (sawKV bool) {
	if h.cfg.Engine == nil {
		return false
	}
	select {
	case h.fetches <- struct{}{}:
		defer func() { <-h.fetches }()
	default:
		return false // maxFetches under way: the view alone
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.cfg.Engine.String(), nil)
	if err != nil {
		return false
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	req.Header.Set("User-Agent", "kneecap-eppmetrics")
	resp, err := h.cfg.Transport.RoundTrip(req)
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	n := h.cfg.Names
	drop := [][]byte{[]byte(n.Waiting), []byte(n.Running)}
	kv := [][]byte{[]byte(n.KVUsage), []byte(n.KVUsageOld)}
	br := bufio.NewReaderSize(io.LimitReader(resp.Body, h.cfg.MaxBytes), lineBuffer)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Longer than any engine writes: left out whole.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err == nil {
				continue
			}
			return sawKV
		}
		if err != nil { // io.EOF, the bound, the timeout: an unfinished line is left out
			return sawKV
		}
		name := lineName(line)
		if matches(name, drop) || !enginemetrics.WellFormed(line) {
			continue
		}
		if matches(name, kv) && !isComment(line) {
			sawKV = true
		}
		_, _ = w.Write(line)
	}
}

func isComment(line []byte) bool {
	line = bytes.TrimLeft(line, " \t")
	return len(line) > 0 && line[0] == '#'
}

// lineName is the metric a line of the text exposition is about: the
// sample's name, or the name after "# HELP " and "# TYPE "; nil for any
// other line.
func lineName(b []byte) []byte {
	b = bytes.TrimLeft(b, " \t")
	if len(b) > 0 && b[0] == '#' {
		rest := bytes.TrimLeft(b[1:], " \t")
		if !bytes.HasPrefix(rest, []byte("HELP")) && !bytes.HasPrefix(rest, []byte("TYPE")) {
			return nil
		}
		b = bytes.TrimLeft(rest[4:], " \t")
	}
	if i := bytes.IndexAny(b, "{ \t\r\n"); i >= 0 {
		b = b[:i]
	}
	return b
}

func matches(name []byte, names [][]byte) bool {
	for _, n := range names {
		if len(n) > 0 && bytes.Equal(name, n) {
			return true
		}
	}
	return false
}

// writeView writes the view's series in the family's names.
func (h *handler) writeView(w *bufio.Writer, sawKV bool) {
	n := h.v.Read()
	names := h.cfg.Names
	gauge := func(name, help string, v float64) {
		_, _ = w.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " ")
		_, _ = w.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		_ = w.WriteByte('\n')
	}
	gauge(names.Waiting, "Requests waiting, as kneecap in front of the engine counts them: its queue, the engine's own waiting, refused requests expected back.", float64(n.Waiting))
	gauge(names.Running, "Requests the engine runs, as kneecap in front of it counts them: its slots held less the engine's own waiting.", float64(n.Running))
	if u, ok := n.KVUsage(); ok && !sawKV {
		gauge(names.KVUsage, "KV-cache usage, 1 means 100 percent, from the engine's own metrics (kneecap).", u)
		if names.KVUsageOld != "" {
			gauge(names.KVUsageOld, "KV-cache usage (older name), from the engine's own metrics (kneecap).", u)
		}
	}
}
