package testengine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"sync"
	"testing"
	"time"
)

// rawExchange sends one request on conn and reads the whole response.
func rawExchange(t *testing.T, conn net.Conn, br *bufio.Reader, body string) *http.Response {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	return resp
}

// closedWithin reports whether the server closes conn within d, and when.
func closedWithin(t *testing.T, conn net.Conn, br *bufio.Reader, d time.Duration) (bool, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(d))
	n, err := br.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case err == io.EOF:
		return true, time.Since(start)
	case errors.As(err, &ne) && ne.Timeout():
		return false, time.Since(start)
	default:
		t.Fatalf("read after the response: %d bytes, %v", n, err)
		return false, 0
	}
}

func dial(t *testing.T, e *Engine) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, bufio.NewReader(conn)
}

func TestConnectionAfterStream(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		conn, br := dial(t, e)
		resp := rawExchange(t, conn, br, `{"stream":true,"max_tokens":2}`)
		// Neither head announces a close: llama.cpp's says keep-alive.
		if resp.Close || resp.Header.Get("Connection") == "close" {
			t.Errorf("head announces a close: %v", resp.Header)
		}
		closed, after := closedWithin(t, conn, br, time.Second)
		switch k {
		case HTTPLib:
			if !closed { // within the second closedWithin waits: uvicorn keeps it 5 s
				t.Fatalf("httplib: connection not closed right after the stream (closed %v after %v)", closed, after)
			}
		case Uvicorn:
			if closed {
				t.Fatalf("uvicorn: connection closed %v after the stream", after)
			}
			rawExchange(t, conn, br, `{"stream":true,"max_tokens":2}`) // reused
		}
	})
}

func TestIdleConnectionClose(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		conn, br := dial(t, e)
		resp := rawExchange(t, conn, br, `{"max_tokens":2}`)
		if resp.Close {
			t.Fatal("non-streamed response closes the connection")
		}
		// Both close an idle kept-alive connection after 5 s.
		closed, after := closedWithin(t, conn, br, 8*time.Second)
		if !closed || after < 4*time.Second || after > 7*time.Second {
			t.Fatalf("closed %v after %v, want closed after ~5s", closed, after)
		}
	})
}

func TestKeepAliveMaxCount(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		conn, br := dial(t, e)
		// cpp-httplib 0.11.4 serves 5 requests on a connection (its default
		// CPPHTTPLIB_KEEPALIVE_MAX_COUNT), says "Connection: close" on the
		// 5th and closes; uvicorn has no limit.
		for i := 1; i <= 5; i++ {
			resp := rawExchange(t, conn, br, `{"max_tokens":1}`)
			if last := k == HTTPLib && i == 5; resp.Close != last {
				t.Fatalf("response %d: Close %v, want %v (%v)", i, resp.Close, last, resp.Header)
			}
		}
		closed, _ := closedWithin(t, conn, br, 300*time.Millisecond)
		if closed != (k == HTTPLib) {
			t.Fatalf("closed after 5 requests: %v", closed)
		}
	})
}

// TestClientReuse shows what a Go http.Client sees: after a streamed
// response from the httplib engine its next request needs a new connection.
func TestClientReuse(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		c := newClient(t)
		c.Transport.(*http.Transport).DisableKeepAlives = false // this test is about reuse
		var reused []bool
		for range 3 {
			var got bool
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(info httptrace.GotConnInfo) { got = info.Reused },
			})
			resp, err := post(ctx, c, e, "/v1/chat/completions", `{"stream":true,"max_tokens":2}`)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := readEvents(resp.Body, nil); err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			reused = append(reused, got)
			time.Sleep(100 * time.Millisecond) // let the transport see the close
		}
		want := []bool{false, k == Uvicorn, k == Uvicorn}
		if fmt.Sprint(reused) != fmt.Sprint(want) {
			t.Errorf("reused %v, want %v", reused, want)
		}
	})
}

// ---- load

func TestConcurrentStreams(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		c := newClient(t)
		const n = 64
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				// Staggered: cpp-httplib listens with a backlog of 5, and
				// a burst of connects overflows it (SYNs are retried 1 s
				// later).
				time.Sleep(time.Duration(i) * 5 * time.Millisecond)
				resp, err := post(context.Background(), c, e, "/v1/chat/completions", `{"stream":true,"max_tokens":12}`, HeaderGap, "150")
				if err != nil {
					errs <- err
					return
				}
				defer func() { _ = resp.Body.Close() }()
				datas, err := readEvents(resp.Body, nil)
				if err == nil && (len(datas) == 0 || datas[len(datas)-1] != "[DONE]") {
					err = fmt.Errorf("no [DONE]: %d events", len(datas))
				}
				if err != nil {
					errs <- err
				}
			})
		}
		peak := 0
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && peak < n; time.Sleep(20 * time.Millisecond) {
			_, active := e.Stats(t)
			peak = max(peak, active)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if peak != n {
			t.Errorf("at most %d streams served at once, want %d", peak, n)
		}
		waitIdle(t, e)
	})
}

// ---- building

func TestWriteOnce(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/f"
	calls := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			err := writeOnce(path, 0o644, func(tmp string) error {
				mu.Lock()
				calls++
				mu.Unlock()
				return os.WriteFile(tmp, []byte("x"), 0o600)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if b, err := os.ReadFile(path); err != nil || string(b) != "x" || calls != 1 {
		t.Fatalf("%q, %v, %d builds", b, err, calls)
	}
	if err := writeOnce(t.TempDir()+"/g", 0o644, func(string) error { return errors.New("boom") }); err == nil {
		t.Fatal("a failed build is not an error")
	}
}
