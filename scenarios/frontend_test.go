package scenarios

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/admission/peers"
	"github.com/kneecap/kneecap/gateway"
)

// TestPeersRefuseAtOnce: every peer's gateway refuses a request over the
// peer's limit at once, with a Retry-After, instead of queueing it.
func TestPeersRefuseAtOnce(t *testing.T) {
	for _, p := range Peers {
		t.Run(p, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fe := newTestFrontend(t, Mode{Kind: "peer", Peer: p})
				lim := fe.gw.Limiter()
				n := lim.Limit()
				for i := range n {
					tk, err := lim.Acquire(t.Context(), admission.Request{Arrival: time.Now()})
					if err != nil {
						t.Fatalf("request %d of the limit %d: %v", i+1, n, err)
					}
					defer tk.Release()
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				start := time.Now()
				_, err := lim.Acquire(ctx, admission.Request{Arrival: start, MaxWait: time.Second})
				re := admission.AsReject(err)
				if !errors.Is(err, admission.ErrQueueFull) || re == nil || re.RetryAfter <= 0 || time.Since(start) != 0 {
					t.Fatalf("over the limit %d: %v after %v; want queue_full at once with a Retry-After", n, err, time.Since(start))
				}
			})
		})
	}
}

// TestPeerConfigurations: each name builds the peer of that name, and
// envoy-pinned pins its minimum RTT at the whole-request latency of a
// request of the workload's mean length that just meets both targets.
func TestPeerConfigurations(t *testing.T) {
	sc := All()[0]
	for _, p := range Peers {
		alg, dropOnMiss, err := newPeer(p, sc)
		if err != nil || alg.Name() != p || dropOnMiss != (p == "netflix-aimd-slo") {
			t.Fatalf("newPeer(%q): %v, name %q, drop on miss %v", p, err, alg.Name(), dropOnMiss)
		}
	}
	alg, _, _ := newPeer("envoy-pinned", sc)
	want := TTFTTarget + 127*TPOTTarget // 128 output tokens
	if got := alg.(*peers.Envoy).FixedMinRTT; got != want {
		t.Fatalf("envoy-pinned min RTT %v, want %v", got, want)
	}
	if _, _, err := newPeer("nobody", sc); err == nil {
		t.Fatal("unknown peer accepted")
	}
}

func newTestFrontend(t *testing.T, m Mode) *frontend {
	t.Helper()
	eng, err := newEndpoint("engine", false)
	if err != nil {
		t.Fatal(err)
	}
	fe, err := newFrontend(Run{Scenario: All()[0], Mode: m}, eng, newPipeListener("gateway"), newPipeListener("admin"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return fe
}

// A budget cap is kneecap's static cap with the token budget on, as an
// operator sets it; the suite's static caps count requests only.
func TestBudgetModeKeepsTheTokenBudget(t *testing.T) {
	base := []string{"KNEECAP_UPSTREAM=http://engine"}
	for _, tc := range []struct {
		m      Mode
		budget bool
	}{{Mode{Kind: "static", Cap: 8}, false}, {Mode{Kind: "budget", Cap: 8}, true}} {
		cfg, err := gateway.ConfigFromEnv(append(base, modeSettings(tc.m)...))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MaxConcurrency != 8 || cfg.TokenBudget != tc.budget {
			t.Errorf("%s: cap %d, token budget %v; want 8 and %v", tc.m, cfg.MaxConcurrency, cfg.TokenBudget, tc.budget)
		}
	}
}
