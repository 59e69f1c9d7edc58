package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// script is a fake engine: for each request it waits TTFT, sends the first
// output chunk, then the rest at Gaps (one token per chunk unless PerChunk),
// then a usage-only chunk and [DONE], in vLLM's shape.
type script struct {
	TTFT    time.Duration
	Tokens  int           // output tokens reported in usage
	Decode  time.Duration // from first to last output chunk, evenly spread
	Chunks  int           // output chunks; zero means Tokens
	NoUsage bool
	Serial  bool // one request at a time, as an engine with one slot
	Reject  func(n int, r *http.Request) (retryAfter string, reject bool)
	// RejectMs, when set, gives a refusal's retry-after-ms header.
	RejectMs func(n int) string
	OnHeader func(r *http.Request)

	mu   sync.Mutex
	n    int
	slot sync.Mutex
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := s.n
	s.n++
	s.mu.Unlock()
	if s.OnHeader != nil {
		s.OnHeader(r)
	}
	if s.Reject != nil {
		if ra, ok := s.Reject(n, r); ok {
			w.Header().Set("X-Kneecap-Reason", "queue_full")
			if ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			if s.RejectMs != nil {
				if ms := s.RejectMs(n); ms != "" {
					w.Header().Set("Retry-After-Ms", ms)
				}
			}
			http.Error(w, `{"error":{"message":"queue is full","type":"rate_limit_error","param":null,"code":"queue_full"}}`, http.StatusTooManyRequests)
			return
		}
	}
	if s.Serial {
		s.slot.Lock()
		defer s.slot.Unlock()
	}
	start := time.Now()
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	fl.Flush()
	chunks := s.Chunks
	if chunks == 0 {
		chunks = s.Tokens
	}
	for i := range chunks {
		at := s.TTFT
		if chunks > 1 {
			at += s.Decode * time.Duration(i) / time.Duration(chunks-1)
		}
		if !sleepUntil(r.Context(), start.Add(at)) {
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"},\"finish_reason\":null}]}\n\n")
		fl.Flush()
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	if !s.NoUsage {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", s.Tokens, s.Tokens+3)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

func sleepUntil(ctx context.Context, t time.Time) bool { return sleep(ctx, time.Until(t)) }

// pipeNet serves a handler over net.Pipe connections, so that client and
// server run inside one testing/synctest bubble (as the scenario suite does).
type pipeNet struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (p *pipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}
func (p *pipeNet) Close() error   { p.once.Do(func() { close(p.done) }); return nil }
func (p *pipeNet) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// servePipe starts h on a pipe network and returns a client that dials it;
// the cleanup stops the server and closes the client's connections.
func servePipe(t *testing.T, h http.Handler) *http.Client {
	p := &pipeNet{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: h}
	go srv.Serve(p)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, s := net.Pipe()
		select {
		case p.conns <- s:
			return c, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Shutdown(context.Background())
	})
	return &http.Client{Transport: tr}
}

func ms2(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
