package gateway

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/proxy/proxytest"
)

// agentSays reads one agent-check answer, as HAProxy does: connect, read
// until the agent closes.
func agentSays(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestAgentCheck: the agent reports the cap as a weight while serving and
// "drain" once the gateway drains.
func TestAgentCheck(t *testing.T) {
	eng := &proxytest.Engine{Chunks: 2}
	addr := freeAddr(t)
	h := start(t, eng, Config{MaxConcurrency: 3, AgentListen: addr})
	waitFor(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if got := agentSays(t, addr); got != "ready up 3%\n" {
		t.Fatalf("serving: agent says %q, want %q", got, "ready up 3%\n")
	}
	h.g.Limiter().SetLimit(7)
	if got := agentSays(t, addr); got != "ready up 7%\n" {
		t.Fatalf("after the cap moved: agent says %q", got)
	}
	h.g.Drain()
	if got := agentSays(t, addr); got != "drain\n" {
		t.Fatalf("draining: agent says %q, want %q", got, "drain\n")
	}
	h.stop(t)
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("the agent still listens after Run returned")
	}
}

func TestAgentListenSetting(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want string // "" parses
	}{
		{"KNEECAP_REFUSAL_STATUS=503", ""},
		{"KNEECAP_REFUSAL_STATUS=429", ""},
		{"KNEECAP_REFUSAL_STATUS=500", "KNEECAP_REFUSAL_STATUS: must be 429 or 503"},
		{"KNEECAP_AGENT_LISTEN=:9091", ""},
	} {
		_, err := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:8000", tc.env})
		if got := errString(err); got != tc.want {
			t.Errorf("%s: error %q, want %q", tc.env, got, tc.want)
		}
	}
	cfg, _ := ConfigFromEnv([]string{"KNEECAP_UPSTREAM=http://127.0.0.1:8000"})
	if cfg.RefusalStatus != 429 || cfg.AgentListen != "" {
		t.Fatalf("defaults: refusal status %d, agent %q", cfg.RefusalStatus, cfg.AgentListen)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestRefusalStatus: with KNEECAP_REFUSAL_STATUS=503 a refusal is a 503
// with the same reason and Retry-After, a stream still streams, and the
// default stays 429.
func TestRefusalStatus(t *testing.T) {
	for _, status := range []int{0, 429, 503} {
		eng := &proxytest.Engine{Flavor: proxytest.VLLM, Chunks: 5, Gap: 100 * time.Millisecond}
		h := start(t, eng, Config{MaxConcurrency: 1, MaxQueueWait: 50 * time.Millisecond, RefusalStatus: status})
		body := `{"model":"m","stream":true,"messages":[]}`
		var wg sync.WaitGroup
		var first string
		var firstCode int
		wg.Go(func() {
			resp, err := http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				first = err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			firstCode, first = resp.StatusCode, string(b)
		})
		waitFor(t, func() bool { return h.g.Limiter().Running() == 1 })
		resp, err := http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 429
		if status == 503 {
			want = 503
		}
		if resp.StatusCode != want || resp.Header.Get(proxy.HeaderReason) != "queue_timeout" || resp.Header.Get("Retry-After") == "" {
			t.Errorf("refusal status %d: got %d, reason %q, Retry-After %q; want %d queue_timeout",
				status, resp.StatusCode, resp.Header.Get(proxy.HeaderReason), resp.Header.Get("Retry-After"), want)
		}
		wg.Wait()
		if firstCode != 200 || !strings.HasSuffix(first, "data: [DONE]\n\n") {
			t.Errorf("refusal status %d: the running stream got %d %q", status, firstCode, first)
		}
		h.stop(t)
	}
}
