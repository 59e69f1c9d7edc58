package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRawProxyStreams streams paced and unpaced responses from the engine
// through rawProxy in both read modes and behind both servers (targets
// rawproxy, rawedge, rawconn): every stream complete, every event
// delivered, connections reused.
func TestRawProxyStreams(t *testing.T) {
	eng := httptest.NewServer(engineHandler())
	defer eng.Close()
	for _, mode := range []struct{ edge, rawServer bool }{{false, false}, {true, false}, {true, true}} {
		edge := mode.edge
		rp := &rawProxy{addr: strings.TrimPrefix(eng.URL, "http://"), edge: edge}
		var base string
		var closeSrv func()
		if mode.rawServer {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go rp.serveConns(ln)
			base, closeSrv = "http://"+ln.Addr().String(), func() { ln.Close() }
		} else {
			srv := httptest.NewServer(rp)
			base, closeSrv = srv.URL, srv.Close
		}
		tr := newClientTransport()
		client := &http.Client{Transport: tr}
		for _, w := range []workload{
			{streams: 3, perWorker: 2, steadyFrom: 1, chunks: 5, interval: 2 * time.Millisecond, stagger: 10 * time.Millisecond, timeout: 10 * time.Second},
			{streams: 4, perWorker: 1, chunks: 2000, stagger: time.Millisecond, timeout: 10 * time.Second},
		} {
			for _, r := range runRound(context.Background(), client, base, w) {
				if r.broken || r.events != w.chunks+3 {
					t.Errorf("edge %v: broken %v (%s), %d events, want %d", edge, r.broken, r.reason, r.events, w.chunks+3)
				}
			}
		}
		rp.mu.Lock()
		idle := len(rp.idle)
		rp.mu.Unlock()
		if idle == 0 || idle > 4 {
			t.Errorf("edge %v: %d idle engine connections, want 1-4", edge, idle)
		}
		tr.CloseIdleConnections()
		closeSrv()
		for _, u := range rp.idle {
			u.c.Close()
		}
	}
}

// TestRawProxyClientCancel: a client that leaves mid-stream ends the
// engine request (its handler sees the cancellation).
func TestRawProxyClientCancel(t *testing.T) {
	ended := make(chan struct{})
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(chunkBytes)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(ended)
	}))
	defer eng.Close()
	for _, edge := range []bool{false, true} {
		ended = make(chan struct{})
		srv := httptest.NewServer(&rawProxy{addr: strings.TrimPrefix(eng.URL, "http://"), edge: edge})
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(chunkBytes))
		if _, err := io.ReadFull(resp.Body, buf); err != nil || !bytes.Equal(buf, chunkBytes) {
			t.Fatalf("edge %v: first chunk %q, %v", edge, buf, err)
		}
		cancel()
		resp.Body.Close()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatalf("edge %v: the engine request was not cancelled", edge)
		}
		http.DefaultClient.CloseIdleConnections()
		srv.Close()
	}
}

// TestDechunker feeds a chunked body in every split and in pieces of one
// byte: the data and the end come out the same.
func TestDechunker(t *testing.T) {
	body := "5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\nTrailer: x\r\n\r\n"
	for split := 0; split <= len(body); split++ {
		for _, step := range []int{0, 1} {
			var d dechunker
			var got []byte
			out := func(b []byte) error { got = append(got, b...); return nil }
			parts := []string{body[:split], body[split:]}
			if step == 1 {
				parts = strings.Split(body, "")
			}
			for _, p := range parts {
				rest, err := d.feed([]byte(p), out)
				if err != nil || len(rest) > 0 {
					t.Fatalf("split %d step %d: rest %q, err %v", split, step, rest, err)
				}
			}
			if !d.done() || string(got) != "hello world!" {
				t.Fatalf("split %d step %d: done %v, data %q", split, step, d.done(), got)
			}
		}
	}
	var d dechunker
	if _, err := d.feed([]byte("zz\r\n"), func([]byte) error { return nil }); err == nil {
		t.Error("a bad chunk size was accepted")
	}
}
