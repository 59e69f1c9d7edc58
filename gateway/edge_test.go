package gateway

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
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
