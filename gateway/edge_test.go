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
