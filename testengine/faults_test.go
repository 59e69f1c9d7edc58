package testengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestFaults(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		// A connection per request: the httplib engine closes a connection
		// after a streamed response, and a concurrent request may already
		// have taken it from the pool (see TestClientReuse).
		c := newClient(t)
		const stream = `{"stream":true,"max_tokens":8,"stream_options":{"include_usage":true}}`
		const plain = `{"max_tokens":8}`

		t.Run("group", func(t *testing.T) {
			for _, status := range []int{500, 400, 503} {
				t.Run(fmt.Sprint("status-", status), func(t *testing.T) {
					t.Parallel()
					resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, fmt.Sprint("status-", status))
					var eb struct{ Error struct{ Message string } }
					err := json.NewDecoder(resp.Body).Decode(&eb)
					if resp.StatusCode != status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
						err != nil || eb.Error.Message == "" {
						t.Errorf("status %d %q, %+v, %v", resp.StatusCode, resp.Header.Get("Content-Type"), eb, err)
					}
				})
			}
			for _, tc := range []struct {
				fault  string
				status int
				body   string
			}{{FaultNonJSON500, 500, "Internal Server Error"}, {FaultNonJSON200, 200, "hello"}} {
				t.Run(tc.fault, func(t *testing.T) {
					t.Parallel()
					for _, body := range []string{stream, plain} {
						resp := mustPost(t, c, e, "/v1/completions", body, HeaderFault, tc.fault)
						b, err := io.ReadAll(resp.Body)
						if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
							err != nil || string(b) != tc.body {
							t.Errorf("%d %q %q %v", resp.StatusCode, resp.Header.Get("Content-Type"), b, err)
						}
					}
				})
			}
			t.Run(FaultBrokenSSE, func(t *testing.T) {
				t.Parallel()
				resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, FaultBrokenSSE)
				datas, err := readEvents(resp.Body, nil)
				if err != nil || len(datas) == 0 || datas[len(datas)-1] != "{not json" {
					t.Fatalf("%q, %v", datas, err)
				}
				if _, ok := decodeChunk(t, datas[len(datas)-2]).content(); !ok {
					t.Errorf("no content chunk before the broken one: %q", datas)
				}
			})
			t.Run(FaultHugeLine, func(t *testing.T) {
				t.Parallel()
				resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, FaultHugeLine)
				datas, err := readEvents(resp.Body, nil)
				if err != nil || len(datas) < 3 || datas[len(datas)-1] != "[DONE]" {
					t.Fatalf("%d events, %v", len(datas), err)
				}
				if huge := datas[len(datas)-2]; len(huge) != 4<<20 || strings.Trim(huge, "x") != "" {
					t.Errorf("huge line of %d bytes", len(huge))
				}
			})
			t.Run(FaultTruncated, func(t *testing.T) {
				t.Parallel()
				resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, FaultTruncated)
				datas, err := readEvents(resp.Body, nil)
				if err != nil {
					t.Fatal(err) // a clean end
				}
				n := 0
				for _, d := range datas {
					if d == "[DONE]" {
						t.Fatalf("[DONE] in a truncated stream: %q", datas)
					}
					ch := decodeChunk(t, d)
					if ch.finish() != "" || ch.Usage != nil {
						t.Errorf("finish or usage in a truncated stream: %s", d)
					}
					if _, ok := ch.content(); ok {
						n++
					}
				}
				if n != 3 {
					t.Errorf("%d content chunks, want 3", n)
				}
			})
			hang := func(t *testing.T, fault, body string, wantHead bool, wantContent int) {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				start := time.Now()
				resp, err := post(ctx, c, e, "/v1/chat/completions", body, HeaderFault, fault)
				if !wantHead {
					if err == nil {
						_ = resp.Body.Close()
						t.Fatalf("a response (%d) despite %s", resp.StatusCode, fault)
					}
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("error %v, want the client's deadline", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("no head: %v", err)
				}
				defer func() { _ = resp.Body.Close() }()
				if resp.StatusCode != 200 {
					t.Fatalf("head: status %d after %v", resp.StatusCode, time.Since(start))
				}
				if _, active := e.Stats(t); active < 1 {
					t.Errorf("a hanging request is not active: %d", active)
				}
				if body == plain {
					if resp.ContentLength <= 0 {
						t.Errorf("Content-Length %d", resp.ContentLength)
					}
					b, err := io.ReadAll(resp.Body)
					if err == nil || len(b) != 0 {
						t.Errorf("body %q, %v: want nothing until the deadline", b, err)
					}
					return
				}
				n := 0
				datas, err := readEvents(resp.Body, nil)
				for _, d := range datas {
					if _, ok := decodeChunk(t, d).content(); ok {
						n++
					}
				}
				if err == nil || n != wantContent || time.Since(start) < 450*time.Millisecond {
					t.Errorf("%d content chunks then %v after %v; want %d then the deadline", n, err, time.Since(start), wantContent)
				}
				if k == Uvicorn && (len(datas) == 0 || !strings.Contains(datas[0], `"role":"assistant"`)) {
					t.Errorf("no role chunk first: %q", datas)
				}
			}
			t.Run(FaultHangBeforeHeaders, func(t *testing.T) {
				t.Parallel()
				hang(t, FaultHangBeforeHeaders, stream, false, 0)
			})
			t.Run(FaultHangAfterHeaders+"/plain", func(t *testing.T) {
				t.Parallel()
				hang(t, FaultHangAfterHeaders, plain, true, 0)
			})
			t.Run(FaultHangAfterHeaders+"/stream", func(t *testing.T) {
				t.Parallel()
				hang(t, FaultHangAfterHeaders, stream, true, 0)
			})
			t.Run(FaultHangMidStream, func(t *testing.T) {
				t.Parallel()
				hang(t, FaultHangMidStream, stream, true, 3)
			})
		})
		// Every hang ended when its client went away.
		waitIdle(t, e)
		if n, _ := e.Stats(t); n != 14 {
			t.Errorf("requests = %d, want 14", n)
		}
		if e.Exited() {
			t.Error("engine exited")
		}
	})
}

// ---- faults that kill the engine; Kill and Restart

func TestKillFaults(t *testing.T) {
	forKinds(t, func(t *testing.T, k Kind) {
		e := Start(t, k)
		c := newClient(t)
		url := e.URL().String()
		const stream = `{"stream":true,"max_tokens":8}`
		expectDeath := func(t *testing.T) {
			t.Helper()
			done := make(chan error, 1)
			go func() { done <- e.Wait() }()
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Errorf("Wait = %v, want killed by SIGKILL", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("engine still running")
			}
			// Exited and Wait from many goroutines at once.
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if !e.Exited() || e.Wait() == nil {
						t.Error("Exited false or Wait nil after the engine died")
					}
				})
			}
			wg.Wait()
			if conn, err := net.Dial("tcp", e.Addr()); err == nil {
				_ = conn.Close()
				t.Error("dead engine's port accepts connections")
			}
			e.Restart(t)
			if e.Exited() || e.URL().String() != url {
				t.Fatalf("after Restart: exited %v, URL %s (was %s)", e.Exited(), e.URL(), url)
			}
			if n, _ := e.Stats(t); n != 0 {
				t.Errorf("fresh process counts %d requests", n)
			}
		}

		t.Run(FaultKillBeforeHeaders, func(t *testing.T) {
			resp, err := post(context.Background(), c, e, "/v1/chat/completions", stream, HeaderFault, FaultKillBeforeHeaders)
			if err == nil {
				_ = resp.Body.Close()
				t.Fatalf("a response (%d)", resp.StatusCode)
			}
			expectDeath(t)
		})
		for _, body := range []string{stream, `{"max_tokens":8}`} {
			name := FaultKillAfterHeaders + "/stream"
			if !strings.Contains(body, "stream") {
				name = FaultKillAfterHeaders + "/plain"
			}
			t.Run(name, func(t *testing.T) {
				resp := mustPost(t, c, e, "/v1/chat/completions", body, HeaderFault, FaultKillAfterHeaders)
				b, err := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("status %d, body %q, %v; want 200 then unexpected EOF", resp.StatusCode, b, err)
				}
				if body != stream && resp.ContentLength <= 0 {
					t.Errorf("Content-Length %d", resp.ContentLength)
				}
				expectDeath(t)
			})
		}
		t.Run(FaultKillMidStream, func(t *testing.T) {
			resp := mustPost(t, c, e, "/v1/chat/completions", stream, HeaderFault, FaultKillMidStream)
			n := 0
			_, err := readEvents(resp.Body, func(d string) {
				if _, ok := decodeChunk(t, d).content(); ok {
					n++
				}
			})
			if n != 3 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%d content chunks then %v; want 3 then unexpected EOF", n, err)
			}
			expectDeath(t)
		})
		t.Run("Kill", func(t *testing.T) {
			e.Kill()
			if !e.Exited() {
				t.Fatal("Exited false after Kill")
			}
			e.Kill() // again: nothing
			if _, err := net.Dial("tcp", e.Addr()); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial after Kill: %v, want connection refused", err)
			}
			e.Restart(t)
			e.Restart(t) // of a running engine: kills it first
			resp := mustPost(t, c, e, "/v1/completions", `{"max_tokens":1}`)
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 {
				t.Fatalf("after Restart: %d %s", resp.StatusCode, b)
			}
		})
	})
}

// ---- connection behaviour on the wire
