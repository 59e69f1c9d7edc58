package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kneecap/kneecap/proxy"
)

// HAProxy's agent-check (the "agent-check" server option of HAProxy 1.5 and
// later): HAProxy connects to agent-port every agent-inter, reads one line
// and closes. The line is words separated by spaces: a state ("up",
// "down", "ready", "drain", "maint") and a weight as a percentage of the
// server's configured weight ("6%"). kneecap answers
//
//	ready up <cap>%     serving: with "weight 100" on the server line the
//	                    effective weight is the cap (HAProxy bounds it at 256)
//	drain               draining: no new requests, running ones finish
//
// so that HAProxy's leastconn, which picks the server with the fewest
// connections per unit of weight, fills each replica in proportion to its
// own knee: a replica on a slower engine, with a lower cap, gets fewer
// requests before the others get more. Its weight follows the cap as the
// controller moves it, at the agent's interval. "ready" takes a server out
// of drain when a new kneecap answers at the address of a drained one.

// agentTimeout bounds writing one agent line.
const agentTimeout = time.Second

// agentLine is what the agent tells HAProxy now.
func (g *Gateway) agentLine() string {
	if g.draining.Load() {
		return "drain\n"
	}
	return "ready up " + strconv.Itoa(max(g.lim.Limit(), 1)) + "%\n"
}

// serveAgent answers every connection on ln with one agent line until ln is
// closed; it returns nil then. Each answer is written by its own goroutine,
// which ends within agentTimeout; serveAgent waits for them.
func (g *Gateway) serveAgent(ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		wg.Go(func() {
			defer c.Close()
			_ = c.SetWriteDeadline(time.Now().Add(agentTimeout))
			_, _ = io.WriteString(c, g.agentLine())
		})
	}
}

// refusalStatus answers refusals with status instead of 429 (503 for a
// load balancer that retries a 503 on another replica but cannot retry a
// 429). A draining 503 and every other status pass unchanged. The wrapper
// is installed only when the operator asked for it.
func refusalStatus(status int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&refusalWriter{ResponseWriter: w, status: status}, r)
	})
}

// refusalWriter rewrites a 429 that carries X-Kneecap-Reason (a refusal of
// kneecap's own, never an engine's relayed status) to its status.
type refusalWriter struct {
	http.ResponseWriter
	status int
}

func (w *refusalWriter) WriteHeader(code int) {
	if code == http.StatusTooManyRequests && w.Header().Get(proxy.HeaderReason) != "" {
		code = w.status
	}
	w.ResponseWriter.WriteHeader(code)
}

// Flush and Unwrap keep streaming working through the wrapper
// (http.Flusher, and http.ResponseController's deadlines).
func (w *refusalWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
