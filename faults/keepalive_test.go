package faults

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kneecap/kneecap/testengine"
)

// TestKeepAlive is issue 12's measure of lost requests: users send short
// streamed requests through the gateway (static cap 64) to each engine,
// first back to back with 0.1-0.3 s between them for 30 s (llama.cpp's
// server closes the connection after every streamed response), then 16
// users pausing 4.6-5.4 s (around the engines' 5 s keep-alive) for 40 s.
// Every response must be a complete stream: no 5xx, no broken stream.
func TestKeepAlive(t *testing.T) {
	for _, kind := range testengine.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			eng := testengine.Start(t, kind)
			h := startGateway(t, eng, "KNEECAP_MAX_CONCURRENCY=64", "KNEECAP_SLO_TTFT=10s", "KNEECAP_SLO_TPOT=1s")
			for _, c := range []struct {
				name       string
				users      int
				pause, jit time.Duration
				run        time.Duration
			}{
				{"back to back", 8, 100 * time.Millisecond, 200 * time.Millisecond, 30 * time.Second},
				{"pauses around keep-alive", 16, 4600 * time.Millisecond, 800 * time.Millisecond, 40 * time.Second},
			} {
				t.Run(c.name, func(t *testing.T) {
					n, bad := closedLoop(t, h.traffic, c.users, c.pause, c.jit, c.run)
					t.Logf("%d requests, %d not complete, %d sent again by the gateway", n, len(bad), int(h.counter(t, "kneecap_upstream_retries_total")))
					for i, s := range bad {
						if i == 5 {
							break
						}
						t.Errorf("not a complete stream: %s", s)
					}
					if n < c.users*int(c.run/(c.pause+c.jit))/2 {
						t.Errorf("only %d requests in %s", n, c.run)
					}
					settle(t, h, eng)
				})
			}
		})
	}
}

// closedLoop runs users that each send a short streamed request, wait
// pause plus up to jitter, and again, for run. It returns the number of
// requests and what the client saw of those that were not complete streams.
func closedLoop(t *testing.T, base string, users int, pause, jitter, run time.Duration) (int, []seen) {
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	// Each user has its own client, as separate processes would.
	var (
		mu  sync.Mutex
		n   int
		bad []seen
		wg  sync.WaitGroup
	)
	for range users {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			for ctx.Err() == nil {
				s, err := request(context.Background(), c, base, true, 8)
				mu.Lock()
				n++
				if err != nil || !s.complete || s.status != http.StatusOK {
					if err != nil {
						s.body = err.Error()
					}
					bad = append(bad, s)
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(pause + rand.N(jitter)):
				}
			}
		})
	}
	wg.Wait()
	return n, bad
}
