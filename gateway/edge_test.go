package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/proxy/proxytest"
)

// TestContentLengthClaims: 8 connections each promise a 16 MiB body and
// send one byte. The gateway's heap must grow with the bytes received, not
// with the claims (under 16 MiB for all 8), and the server must close each
// connection within its read timeout.
func TestContentLengthClaims(t *testing.T) {
	h := start(t, &proxytest.Engine{}, Config{ClientReadTimeout: time.Second, ClientHeaderTimeout: time.Second})
	addr := strings.TrimPrefix(h.traffic, "http://")
	heapNow := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heapNow()
	var conns []net.Conn
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/tokenize"} {
		for range 2 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", path, 16<<20)
			conns = append(conns, c)
		}
	}
	time.Sleep(300 * time.Millisecond) // every handler is reading its body now
	if grew := int64(heapNow()) - int64(before); grew > 16<<20 {
		t.Errorf("8 claims of 16 MiB grew the heap by %d MiB", grew>>20)
	} else {
		t.Logf("8 claims of 16 MiB grew the heap by %d KiB", grew>>10)
	}
	start := time.Now()
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("connection %d not closed by the server: %v", i, err)
		}
	}
	t.Logf("all closed %v after the check", time.Since(start).Round(time.Millisecond))
}

// TestUpstreamIdleTimeout: an engine connection idle for longer than
// KNEECAP_UPSTREAM_IDLE_TIMEOUT is not reused (the engines close theirs at
// 5 s; the gateway must let go first); 0 opens one per request.
func TestUpstreamIdleTimeout(t *testing.T) {
	for _, tc := range []struct {
		idle  time.Duration
		pause time.Duration
		conns int
	}{
		{time.Minute, 300 * time.Millisecond, 1},
		{100 * time.Millisecond, 300 * time.Millisecond, 2},
		{0, 0, 2},
	} {
		var mu sync.Mutex
		peers := map[string]bool{}
		eng := &proxytest.Engine{}
		engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			peers[r.RemoteAddr] = true
			mu.Unlock()
			eng.ServeHTTP(w, r)
		})
		h := start(t, engine, Config{UpstreamIdleTimeout: tc.idle})
		for i := range 2 {
			if i > 0 {
				time.Sleep(tc.pause)
			}
			resp, err := http.Post(h.traffic+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		h.stop(t)
		mu.Lock()
		if len(peers) != tc.conns {
			t.Errorf("idle %v, pause %v: %d engine connections, want %d", tc.idle, tc.pause, len(peers), tc.conns)
		}
		mu.Unlock()
	}
}

// TestSLOHeadersSetting: KNEECAP_SLO_HEADERS and the floors reach the
// proxy: off ignores a request's x-slo-* headers, any applies them down to
// the floor.
func TestSLOHeadersSetting(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want time.Duration // the TTFT target the request is judged against
	}{{"off", time.Second}, {"any", 100 * time.Millisecond}} {
		var rec windowlessRecorder
		h := start(t, &proxytest.Engine{}, Config{SLOTTFT: time.Second, SLOHeaders: tc.mode, SLOHeaderFloorTTFT: 100 * time.Millisecond},
			WithObserver(&rec))
		req, _ := http.NewRequest(http.MethodPost, h.traffic+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
		req.Header.Set("X-Slo-Ttft-Ms", "5") // below the floor
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h.stop(t)
		rec.mu.Lock()
		if len(rec.recs) != 1 || rec.recs[0].Targets.TTFT != tc.want {
			t.Errorf("KNEECAP_SLO_HEADERS=%s: records %+v, want one with TTFT target %v", tc.mode, rec.recs, tc.want)
		}
		rec.mu.Unlock()
	}
}

// TestAFreshConnectionWaitsLikeAKeptAliveOne: a connection a client opened
// ahead of need (Go's transport keeps one it dialed for a request another
// connection served; Envoy and browsers preconnect) waits for its first
// request as a kept-alive one waits for its next, KNEECAP_CLIENT_IDLE_TIMEOUT,
// and the header timeout runs from its first byte. Closed at the header
// timeout instead, it races the client's reuse, and the request sent on it
// as the gateway closes it is lost (reset by peer). A client that starts a
// request and stalls is still cut at the header timeout, and one that sends
// nothing at the idle timeout.
func TestAFreshConnectionWaitsLikeAKeptAliveOne(t *testing.T) {
	const header, idle = 200 * time.Millisecond, 3 * time.Second
	h := start(t, &proxytest.Engine{}, Config{ClientHeaderTimeout: header, ClientIdleTimeout: idle, ClientReadTimeout: time.Minute})
	addr := strings.TrimPrefix(h.traffic, "http://")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		return c
	}
	// closedAfter reads c to its end and says how long that took.
	closedAfter := func(c net.Conn) (time.Duration, string) {
		from := time.Now()
		b, err := io.ReadAll(c)
		if err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("reading to the end: %v", err)
		}
		return time.Since(from), string(b)
	}

	fresh := dial()
	time.Sleep(3 * header)
	body := `{"model":"m","stream":true,"messages":[]}`
	fmt.Fprintf(fresh, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if _, got := closedAfter(fresh); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("a request on a connection opened %v before it: got %q, want a 200", 3*header, got)
	}

	stalled := dial()
	fmt.Fprint(stalled, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
	if took, got := closedAfter(stalled); took >= idle || got != "" && !strings.Contains(got, " 408 ") {
		t.Errorf("a request stalled in its headers: closed after %v with %q, want within the header timeout (%v, far below the idle %v)", took, got, header, idle)
	}

	silent := dial()
	if took, got := closedAfter(silent); took < idle-header || got != "" {
		t.Errorf("a connection that sends nothing: closed after %v with %q, want at the idle timeout %v and nothing sent", took, got, idle)
	}
}
