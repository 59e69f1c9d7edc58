package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kneecap/kneecap/testengine"
)

// TestClientsLeaveWhileQueued queues 1,000 requests behind two long
// streams, then has every client leave: the queue empties at once, none of
// them reaches the engine, and the two streams finish whole.
func TestClientsLeaveWhileQueued(t *testing.T) {
	eng := testengine.Start(t, testengine.Uvicorn)
	h := startGateway(t, eng, "KNEECAP_MAX_CONCURRENCY=2", "KNEECAP_MAX_QUEUE=2000", "KNEECAP_MAX_QUEUE_WAIT=60s",
		"KNEECAP_SLO_TTFT=60s", "KNEECAP_SLO_TPOT=1s")
	heap := heapAfterGC()
	before, _ := eng.Stats(t)

	var long sync.WaitGroup
	longSeen := make([]seen, 2)
	for i := range longSeen {
		long.Go(func() {
			s, err := request(context.Background(), http.DefaultClient, h.traffic, true, 400, testengine.HeaderGap, "25")
			if err != nil {
				s.body = err.Error()
			}
			longSeen[i] = s
		})
	}
	waitUntil(t, 10*time.Second, "two streams running", func() bool { return h.g.Limiter().State().Running == 2 })

	const n = 1000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	defer c.CloseIdleConnections()
	var queued sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		queued.Go(func() {
			_, err := request(ctx, c, h.traffic, true, 4)
			errs <- err
		})
	}
	waitUntil(t, 30*time.Second, "1,000 queued", func() bool { return h.g.Limiter().State().Queued == n })
	cancel()
	left := time.Now()
	waitUntil(t, 5*time.Second, "the queue emptied", func() bool { return h.g.Limiter().State().Queued == 0 })
	t.Logf("1,000 queued clients left; the queue was empty %v later", time.Since(left).Round(time.Millisecond))
	queued.Wait()
	close(errs)
	for err := range errs {
		if err == nil {
			t.Fatal("a queued request whose client left got an answer")
		}
	}
	long.Wait()
	for _, s := range longSeen {
		if !s.complete {
			t.Errorf("a running stream was disturbed: %s", s)
		}
	}
	if after, _ := eng.Stats(t); after != before+2 {
		t.Errorf("the engine got %d requests, want 2: a request that left the queue reached it", after-before)
	}
	settle(t, h, eng)
	c.CloseIdleConnections()
	if grew := int64(heapAfterGC()) - int64(heap); grew > 16<<20 {
		t.Errorf("heap grew by %d MiB", grew>>20)
	}
}

// TestClientsLeaveMidStream has 1,000 clients each leave after the first
// output chunk of a long stream: every slot comes back, and the engine
// stops generating for each of them.
func TestClientsLeaveMidStream(t *testing.T) {
	for _, kind := range testengine.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			eng := testengine.Start(t, kind)
			h := startGateway(t, eng, "KNEECAP_MAX_CONCURRENCY=64", "KNEECAP_MAX_QUEUE=2000", "KNEECAP_MAX_QUEUE_WAIT=120s",
				"KNEECAP_SLO_TTFT=120s", "KNEECAP_SLO_TPOT=1s")
			heap := heapAfterGC()
			const n, conc = 1000, 100
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
			defer c.CloseIdleConnections()
			sem := make(chan struct{}, conc)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed []string
			for range n {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					if err := leaveAfterFirstChunk(c, h.traffic); err != nil {
						mu.Lock()
						failed = append(failed, err.Error())
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(failed) > 0 {
				t.Fatalf("%d of %d clients did not get a first chunk; first: %s", len(failed), n, failed[0])
			}
			settle(t, h, eng)
			// A request is reported just after its slot is released.
			waitUntil(t, 5*time.Second, "every request counted as client_cancelled", func() bool {
				return h.counter(t, "kneecap_requests_total", "route", "chat", "outcome", "client_cancelled") == n
			})
			c.CloseIdleConnections()
			if grew := int64(heapAfterGC()) - int64(heap); grew > 16<<20 {
				t.Errorf("heap grew by %d MiB", grew>>20)
			}
		})
	}
}

// leaveAfterFirstChunk starts a long stream and hangs up at its first
// output chunk.
func leaveAfterFirstChunk(c *http.Client, base string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(fmt.Sprintf(chatStream, 200)))
	req.Header.Set(testengine.HeaderGap, "20")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"content":"tok`) {
			return nil // cancel() runs: the client is gone mid-stream
		}
	}
	return fmt.Errorf("no output chunk: %v", sc.Err())
}

// TestClientsLeaveReassembled has 200 clients of requests that are not
// streamed (reassembled from the engine's streams) leave while their long
// answers are being generated: every slot comes back at once, long before
// the answers would have ended, and the engine stops generating for each
// of them.
func TestClientsLeaveReassembled(t *testing.T) {
	for _, kind := range testengine.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			eng := testengine.Start(t, kind)
			h := startGateway(t, eng, "KNEECAP_MAX_CONCURRENCY=64", "KNEECAP_MAX_QUEUE=2000", "KNEECAP_MAX_QUEUE_WAIT=120s",
				"KNEECAP_SLO_TTFT=120s", "KNEECAP_SLO_TPOT=1s")
			heap := heapAfterGC()
			const n = 200
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
			defer c.CloseIdleConnections()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					// 400 tokens 20 ms apart: 8 s to generate.
					_, err := request(ctx, c, h.traffic, false, 400, testengine.HeaderGap, "20")
					errs <- err
				})
			}
			waitUntil(t, 30*time.Second, "64 running, the rest queued", func() bool {
				st := h.g.Limiter().State()
				return st.Running == 64 && st.Queued == n-64
			})
			time.Sleep(300 * time.Millisecond) // output is being generated and reassembled
			cancel()
			left := time.Now()
			waitUntil(t, 2*time.Second, "every slot free", func() bool {
				st := h.g.Limiter().State()
				return st.Running == 0 && st.Queued == 0
			})
			t.Logf("%d clients of reassembled answers left; every slot was free %v later", n, time.Since(left).Round(time.Millisecond))
			wg.Wait()
			close(errs)
			for err := range errs {
				if err == nil {
					t.Fatal("a client that left got an answer")
				}
			}
			settle(t, h, eng) // the engine generates for none of them
			waitUntil(t, 5*time.Second, "every request counted as client_cancelled", func() bool {
				return h.counter(t, "kneecap_requests_total", "route", "chat", "outcome", "client_cancelled") == n
			})
			c.CloseIdleConnections()
			if grew := int64(heapAfterGC()) - int64(heap); grew > 16<<20 {
				t.Errorf("heap grew by %d MiB", grew>>20)
			}
		})
	}
}

// TestSlowClients has one client read a byte a second and one never read,
// each from a long stream, while another client streams normally: the
// slow two are cut off within the client write timeout and their slots
// freed; the normal one is not disturbed.
func TestSlowClients(t *testing.T) {
	eng := testengine.Start(t, testengine.Uvicorn)
	h := startGateway(t, eng, faultEnv...) // KNEECAP_CLIENT_WRITE_TIMEOUT=1s
	before, _ := eng.Stats(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, perSecond := range []int{1, 0} {
		conn := rawStream(t, h.traffic, 20000)
		wg.Go(func() {
			defer conn.Close()
			b := make([]byte, 1)
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
				if perSecond > 0 {
					_ = conn.SetReadDeadline(time.Now().Add(time.Second))
					_, _ = conn.Read(b)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	waitUntil(t, 10*time.Second, "both slow streams reached the engine", func() bool { n, _ := eng.Stats(t); return n >= before+2 })
	s, err := request(context.Background(), http.DefaultClient, h.traffic, true, 50)
	if err != nil || !s.complete {
		t.Errorf("a normal client beside the slow ones: %v %s", err, s)
	}
	start := time.Now()
	waitUntil(t, 20*time.Second, "the slow clients' slots freed", func() bool { return h.g.Limiter().State().Running == 0 })
	t.Logf("slots freed %v after the normal stream ended", time.Since(start).Round(time.Millisecond))
	// A request is reported just after its slot is released: wait for it.
	waitUntil(t, 5*time.Second, "2 requests counted as client_cancelled", func() bool {
		return h.counter(t, "kneecap_requests_total", "route", "chat", "outcome", "client_cancelled") == 2
	})
	settle(t, h, eng)
}

// rawStream sends a streamed request on a connection with a small receive
// buffer, reads nothing, and returns the connection.
func rawStream(t *testing.T, base string, tokens int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(chatStream, tokens)
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: kneecap\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestPausingClientIsNotAnEngineStall: a client that stops reading for
// longer than the stream-idle timeout (but within its write timeout) while
// the engine streams at full speed gets its whole stream: the relay reading
// nothing while it waits on the client is not the engine's silence.
func TestPausingClientIsNotAnEngineStall(t *testing.T) {
	eng := testengine.Start(t, testengine.Uvicorn)
	h := startGateway(t, eng, "KNEECAP_MAX_CONCURRENCY=4", "KNEECAP_SLO_TTFT=60s", "KNEECAP_SLO_TPOT=1s",
		"KNEECAP_STREAM_IDLE_TIMEOUT=1s", "KNEECAP_CLIENT_WRITE_TIMEOUT=30s")
	conn := rawStream(t, h.traffic, 20000)
	defer conn.Close()
	time.Sleep(2500 * time.Millisecond) // the buffers fill; the relay waits on this client
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("after %d bytes: %v", len(b), err)
	}
	if !strings.Contains(string(b), "[DONE]") || strings.Contains(string(b), "stream_idle_timeout") {
		tail := b[max(0, len(b)-400):]
		t.Fatalf("the stream did not end whole (%d bytes); its end: %q", len(b), tail)
	}
	if n := h.counter(t, "kneecap_requests_total", "route", "chat", "outcome", "engine_error"); n != 0 {
		t.Errorf("%v engine errors counted for a client's pause", n)
	}
	settle(t, h, eng)
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
