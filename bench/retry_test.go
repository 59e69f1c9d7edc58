package bench

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// bodies records each request's retry-count header and body, in order.
type bodies struct {
	mu     sync.Mutex
	counts []string
	bodies []string
}

// snapshot returns what was recorded so far.
func (b *bodies) snapshot() (counts, bodies []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.counts...), append([]string(nil), b.bodies...)
}

func (b *bodies) note(r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.counts = append(b.counts, r.Header.Get("X-Stainless-Retry-Count"))
	b.bodies = append(b.bodies, string(body))
	b.mu.Unlock()
}

// The OpenAI SDKs' clients send the same request again after a refusal,
// waiting retry-after-ms (preferred to Retry-After) when it is at most
// 60 s and otherwise backing off 0.5 s, doubling, less up to a quarter, and count
// their attempts in X-Stainless-Retry-Count.
func TestSDKClientsRetryTheSameRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		seen := &bodies{}
		eng := &script{TTFT: 100 * time.Millisecond, Tokens: 2, Decode: 100 * time.Millisecond,
			Reject: func(n int, r *http.Request) (string, bool) {
				seen.note(r)
				switch n {
				case 0:
					return "2", true // retry-after-ms 1500 wins
				case 1:
					return "90", true // beyond 60 s: backoff
				}
				return "", false
			},
			RejectMs: func(n int) string {
				if n == 0 {
					return "1500"
				}
				return ""
			}}
		rep, err := Run(t.Context(), Config{
			BaseURL: "http://e", Client: servePipe(t, eng), Model: "m", Clients: ClientsSDK,
			Levels: []float64{1}, Requests: 3, Targets: Targets{TTFT: time.Second},
		})
		if err != nil {
			t.Fatal(err)
		}
		recs := ended(rep.Levels[0].Records)
		if len(recs) != 3 || recs[0].Outcome != Rejected || recs[1].Outcome != Rejected || recs[2].Outcome != Completed {
			t.Fatalf("outcomes %v", recs)
		}
		for i, r := range recs {
			if r.Attempt != i || r.GaveUp {
				t.Errorf("record %d: attempt %d gave up %v", i, r.Attempt, r.GaveUp)
			}
		}
		if w := recs[1].Due.Sub(recs[0].End); w != 1500*time.Millisecond {
			t.Errorf("waited %v after retry-after-ms 1500, want 1.5s", w)
		}
		if w := recs[2].Due.Sub(recs[1].End); w < 750*time.Millisecond || w > time.Second {
			t.Errorf("waited %v after Retry-After 90, want the second backoff, 0.75-1s", w)
		}
		// (The user may send a fourth request before the level ends.)
		counts, sent := seen.snapshot()
		if want := []string{"0", "1", "2"}; len(counts) < 3 || counts[0] != want[0] || counts[1] != want[1] || counts[2] != want[2] {
			t.Errorf("X-Stainless-Retry-Count %q, want %q first", counts, want)
		}
		if len(sent) < 3 || sent[0] != sent[1] || sent[1] != sent[2] {
			t.Error("a retry sent a different request")
		}
		if s := rep.Levels[0].Summary; s.GaveUp != 0 || s.Rejected != 2 || s.Good != 1 {
			t.Errorf("summary %+v", s)
		}
	})
}

// An SDK client refused three times has failed: it gives up, and the user
// sends its next request, a new one. A client that never retries gives up
// at the first refusal.
func TestClientsGiveUp(t *testing.T) {
	for _, tc := range []struct {
		clients Clients
		gaveUp  int // the attempt that gave up
	}{{ClientsSDK, 2}, {ClientsNone, 0}} {
		t.Run(tc.clients.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				seen := &bodies{}
				eng := &script{TTFT: 100 * time.Millisecond, Tokens: 2, Decode: 100 * time.Millisecond,
					Reject: func(n int, r *http.Request) (string, bool) {
						seen.note(r)
						return "1", n <= tc.gaveUp
					}}
				rep, err := Run(t.Context(), Config{
					BaseURL: "http://e", Client: servePipe(t, eng), Model: "m", Clients: tc.clients,
					Levels: []float64{1}, Requests: tc.gaveUp + 2, Targets: Targets{TTFT: time.Second},
				})
				if err != nil {
					t.Fatal(err)
				}
				recs := ended(rep.Levels[0].Records)
				last := recs[tc.gaveUp]
				if !last.GaveUp || last.Attempt != tc.gaveUp || last.Outcome != Rejected {
					t.Fatalf("attempt %d: %+v, want it given up", tc.gaveUp, last)
				}
				next := recs[tc.gaveUp+1]
				_, sent := seen.snapshot()
				if next.Attempt != 0 || next.GaveUp || next.Outcome != Completed || len(sent) < tc.gaveUp+2 || sent[tc.gaveUp+1] == sent[tc.gaveUp] {
					t.Fatalf("after giving up: %+v, want a new request", next)
				}
				if w := next.Due.Sub(last.End); w > minPause {
					t.Errorf("the next request came %v after giving up, want at most %v", w, minPause)
				}
				if s := rep.Levels[0].Summary; s.GaveUp != 1 {
					t.Errorf("gave up %d, want 1", s.GaveUp)
				}
			})
		})
	}
}

func TestParseClients(t *testing.T) {
	for in, want := range map[string]Clients{"next": ClientsNext, "forever": ClientsNext, "SDK": ClientsSDK, "none": ClientsNone} {
		if got, err := ParseClients(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseClients("sometimes"); err == nil {
		t.Error("no error for an unknown name")
	}
}
