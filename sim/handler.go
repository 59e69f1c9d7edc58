package sim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/kneecap/kneecap/wire"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 32 << 20

// Handler serves the engine's routes: POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models, GET /health and GET /metrics.
// Generation requests wait for Run to schedule them.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", s.health)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteError(w, http.StatusNotFound, wire.TypeInvalidRequest, "not_found", "no route "+r.Method+" "+r.URL.Path)
	})
	return mux
}

func (s *Sim) health(w http.ResponseWriter, _ *http.Request) {
	if !s.ready() {
		wire.WriteError(w, http.StatusServiceUnavailable, wire.TypeUnavailable, "loading", "engine is not ready")
		return
	}
	if s.flavor.name == FlavorLlamaCpp {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Sim) models(w http.ResponseWriter, _ *http.Request) {
	b := append([]byte(`{"object":"list","data":[{"id":`), s.model...)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"owned_by":"kneecap-sim","root":`...)
	b = append(b, s.model...)
	b = append(b, `,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(s.cfg.Profile.MaxModelLen), 10)
	b = append(b, "}]}\n"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// sleep waits d of wall time; it returns false if ctx ends or the engine
// stops first. d == 0 means until then.
func (s *Sim) sleep(ctx context.Context, d time.Duration) bool {
	var c <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		c = t.C
	}
	select {
	case <-c:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}

func (s *Sim) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	if !s.ready() {
		wire.WriteError(w, http.StatusServiceUnavailable, wire.TypeUnavailable, "loading", "engine is not ready")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			wire.WriteError(w, http.StatusRequestEntityTooLarge, wire.TypeInvalidRequest, "body_too_large", err.Error())
			return
		}
		wire.WriteError(w, http.StatusBadRequest, wire.TypeInvalidRequest, "", "reading body: "+err.Error())
		return
	}
	req, err := parseGen(body, chat, s.cfg.Profile, s.block)
	if err != nil {
		wire.WriteError(w, http.StatusBadRequest, wire.TypeInvalidRequest, "", err.Error())
		return
	}
	arrival := time.Now()
	d := s.drawFor(req.maxTokens, req.ignoreEOS)
	ctx := r.Context()
	if d.fail {
		s.log.Debug("sim fault: error", "id", d.id)
		wire.WriteError(w, http.StatusInternalServerError, wire.TypeServer, "", "simulated engine failure")
		return
	}
	if d.hang {
		s.log.Debug("sim fault: hang", "id", d.id)
		if req.stream && s.cfg.Faults.HangAfterHeaders {
			startSSE(w)
		}
		if !s.sleep(ctx, s.scaled(s.cfg.Faults.HangFor)) || s.cfg.Faults.HangFor == 0 {
			return
		}
	}
	if d.slowStart && !s.sleep(ctx, s.scaled(s.cfg.Faults.SlowStartDelay)) {
		return
	}
	reason := "stop"
	if d.outTokens == req.maxTokens {
		reason = "length"
	}
	q := newSeq(req.prompt, d.outTokens, reason, arrival)
	if q.hasher = req.hasher; q.hasher != nil {
		q.blocks = q.hasher.out
	}
	if err := s.submit(q); err != nil {
		wire.WriteError(w, http.StatusServiceUnavailable, wire.TypeUnavailable, "", err.Error())
		return
	}
	prefix := "cmpl-sim-"
	if chat {
		prefix = "chatcmpl-sim-"
	}
	c := &chunker{fl: s.flavor, chat: chat, id: prefix + strconv.FormatUint(d.id, 16),
		created: arrival.Unix(), model: s.model, prompt: req.prompt, lp: -1, total: d.outTokens, prefix: s.block > 0}
	if s.flavor.name == FlavorVLLM { // the other flavours answer with text alone
		c.lp, c.tool = req.logprobs, req.tool
	}
	if req.stream {
		s.stream(w, ctx, q, c, req.includeUsage, d.cutAt, d.hang && s.cfg.Faults.HangAfterHeaders)
		return
	}
	for q.state.Load() == stateRunning {
		select {
		case <-q.ready:
		case <-ctx.Done():
			s.cancel(q)
			return
		}
	}
	if q.state.Load() == stateAborted {
		wire.WriteError(w, http.StatusServiceUnavailable, wire.TypeUnavailable, "", "engine stopped")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	c.cached = q.cached // set at admission, before the state Run stored
	_, _ = w.Write(c.whole(nil, q.reason, q.maxOut))
}

// stream writes tokens as the scheduler publishes them: one chunk per wake-up
// (several tokens when the writer fell behind, as vLLM merges them).
func (s *Sim) stream(w http.ResponseWriter, ctx context.Context, q *seq, c *chunker, includeUsage bool, cutAt int, headersSent bool) {
	if !headersSent {
		startSSE(w)
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, 0, 1024)
	sent := 0
	reasonSent := false // the finish_reason rode on a token chunk
	for {
		select {
		case <-q.ready:
		case <-ctx.Done():
			s.cancel(q)
			return
		}
		if s.cfg.Stagger > 0 { // this stream's turn in the step's output
			if d := time.Until(time.Unix(0, q.due.Load())); d > 0 && !s.sleep(ctx, d) && ctx.Err() != nil {
				s.cancel(q)
				return
			}
		}
		st := q.state.Load() // before out: a final state implies a final count
		n := int(q.out.Load())
		buf = buf[:0]
		if n > sent {
			if cutAt > 0 && n >= cutAt {
				s.cancel(q)
				if sent < cutAt {
					buf = c.tokens(c.startIf(buf, sent), sent, cutAt, "")
					_, _ = w.Write(buf)
					_ = rc.Flush()
				}
				s.log.Debug("sim fault: cut stream", "tokens", cutAt)
				panic(http.ErrAbortHandler) // the connection is closed, no [DONE]
			}
			buf = c.startIf(buf, sent)
			reason := ""
			if st == stateDone && !c.fl.finishSeparate {
				reason = q.reason
			}
			buf = c.tokens(buf, sent, n, reason)
			sent, reasonSent = n, reason != ""
		}
		switch st {
		case stateDone:
			if !c.fl.finishSeparate && !reasonSent {
				// The last token went out while the sequence still read as
				// running (its count is stored before its state): the finish
				// comes in a chunk of its own with empty content, as vLLM
				// sends it when the last output adds no text.
				buf = c.tokens(c.startIf(buf, sent), n, n, q.reason)
			}
			c.cached = q.cached // set at admission, before the state Run stored
			buf = c.end(buf, q.reason, n, includeUsage)
		case stateAborted:
			buf = append(buf, wire.ErrorEvent(wire.TypeUnavailable, "", "engine stopped")...)
		}
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				s.cancel(q)
				return
			}
			_ = rc.Flush()
		}
		if st != stateRunning {
			return
		}
	}
}

// startSSE sends a stream's headers at once, as engines do before the
// first token.
func startSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
}

// startIf appends the opening chunk before the first token.
func (c *chunker) startIf(dst []byte, sent int) []byte {
	if sent == 0 {
		return c.start(dst)
	}
	return dst
}
