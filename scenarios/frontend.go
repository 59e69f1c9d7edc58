package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/admission/control"
	"github.com/kneecap/kneecap/admission/peers"
	"github.com/kneecap/kneecap/gateway"
	"github.com/kneecap/kneecap/learnt"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
)

// frontend is the gateway of one run (built by gateway.New exactly as
// `kneecap serve` builds it, with its defaults) and the trajectory of its
// cap.
type frontend struct {
	gw   *gateway.Gateway
	traj *trajectory
}

// newFrontend builds the gateway for a mode: a static cap is kneecap with
// KNEECAP_MAX_CONCURRENCY set (the controller learns and answers the
// deadline check and Retry-After but never moves the cap), so the oracle
// differs from the adaptive run only in how the cap is chosen; a peer
// drives the same limiter with its own algorithm and no deadline check,
// and runs as it runs at home: over its limit a request is refused at once
// (KNEECAP_MAX_QUEUE=0: a 429 with the limiter's Retry-After, no queue),
// as Envoy's filter answers 503 and Netflix's SimpleLimiter rejects.
func newFrontend(r Run, engine *endpoint, traffic, admin net.Listener, log *slog.Logger) (*frontend, error) {
	tg := r.Scenario.Targets()
	environ := append([]string{"KNEECAP_UPSTREAM=http://" + engine.host, "KNEECAP_SLO_TTFT=" + tg.TTFT.String(), "KNEECAP_SLO_TPOT=" + tg.TPOT.String()}, r.Env...)
	if tg.E2E > 0 {
		environ = append(environ, "KNEECAP_SLO_E2E="+tg.E2E.String())
	}
	cfg, err := gateway.ConfigFromEnv(append(environ, modeSettings(r.Mode)...))
	if err != nil {
		return nil, err
	}
	fe := &frontend{}
	start := time.Now()
	opts := []gateway.Option{gateway.WithTransport(engine.tr), gateway.WithLogger(log), gateway.WithListeners(traffic, admin)}
	switch r.Mode.Kind {
	case "static", "adaptive", "budget":
		// The gateway's own controller; its trajectory starts at the
		// cap it set when built.
		opts = append(opts, gateway.WithOnChange(func(now time.Time, d control.Decision) { fe.traj.add(now, d.Cap) }))
	case "peer":
		if r.Mode.Peer == "vllm-queued-tokens" {
			budget := queuedTokensBudget(r.Scenario, r.Seed)
			opts = append(opts, gateway.WithCapControl(func(h gateway.Host) (gateway.CapControl, error) {
				h.Limiter.SetLimit(r.Mode.Cap)
				h.Limiter.SetCosts(admission.Costs{MaxPrefillTokens: budget})
				fe.traj = newTrajectory(start, r.Mode.Cap)
				return staticControl{}, nil
			}))
			break
		}
		alg, dropOnMiss, err := newPeer(r.Mode.Peer, r.Scenario)
		if err != nil {
			return nil, err
		}
		opts = append(opts, gateway.WithCapControl(func(h gateway.Host) (gateway.CapControl, error) {
			h.Limiter.SetLimit(alg.Limit())
			fe.traj = newTrajectory(start, alg.Limit())
			return &peerDriver{alg: alg, lim: h.Limiter, traj: fe.traj, dropOnMiss: dropOnMiss}, nil
		}))
	default:
		return nil, fmt.Errorf("unknown mode %q", r.Mode.Kind)
	}
	fe.gw, err = gateway.New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	if fe.traj == nil {
		fe.traj = newTrajectory(start, fe.gw.Limiter().Limit())
	}
	return fe, nil
}

// newPeer builds a peer algorithm by name, and says whether it is told of
// a request that missed its targets as a drop.
//
// The two configurations a careful user would pick in front of an LLM
// engine take the targets: envoy-pinned pins Envoy's minimum RTT at the
// whole-request latency of a request of the workload's mean length that
// just meets the scenario's targets, TTFT + TPOT x (output tokens - 1)
// (13.7 s for 128 tokens at 1 s and 100 ms); netflix-aimd-slo is told, as the
// application would call the limiter's onDropped, of every request the
// gateway judged to have missed one of its targets (its own, with
// x-slo-tpot-ms) and of every engine error.
func newPeer(name string, sc Scenario) (alg peers.Algorithm, dropOnMiss bool, err error) {
	switch name {
	case "envoy-gradient":
		return peers.NewEnvoy(), false, nil
	case "envoy-pinned":
		out, tg := time.Duration(max(sc.Workload.OutputTokens, 1)-1), sc.Targets()
		return peers.NewEnvoyPinned(tg.TTFT + out*tg.TPOT), false, nil
	case "netflix-gradient2":
		return peers.NewGradient2(), false, nil
	case "netflix-aimd":
		return peers.NewAIMD(), false, nil
	case "netflix-aimd-slo":
		return peers.NewAIMDSLO(), true, nil
	}
	return nil, false, fmt.Errorf("unknown peer %q", name)
}

// queuedTokensBudget is vLLM's --max-num-queued-tokens as its PR advises
// setting it: the TTFT target times the engine's prefill throughput
// measured alone (a median prompt of the scenario's workload over its
// median TTFT with the engine to itself).
func queuedTokensBudget(sc Scenario, seed uint64) int {
	ttft, _ := sc.Profile.Solo(sc.Workload, 0.5, 200, seed)
	if ttft <= 0 {
		return 0
	}
	perSecond := float64(sc.Workload.PromptTokens) / ttft.Seconds()
	return max(int(sc.Targets().TTFT.Seconds()*perSecond), 1)
}

// staticControl holds the cap where it was set: the count cap of a peer
// that has no controller of its own.
type staticControl struct{}

func (staticControl) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// peerDriver feeds a peer algorithm what it sees at home (whole-request
// latency, in flight, dropped) and applies its limit to the limiter.
type peerDriver struct {
	mu         sync.Mutex
	alg        peers.Algorithm
	lim        *admission.Limiter
	traj       *trajectory
	dropOnMiss bool // a missed target is a drop (netflix-aimd-slo)
}

var _ proxy.Observer = (*peerDriver)(nil)

func (d *peerDriver) FirstChunk(proxy.FirstChunk) {}
func (d *peerDriver) Chunk(proxy.Chunk)           {}

// Done samples a finished request: latency from forwarding to the end
// (the time its slot was held). Refusals and requests whose client left
// are not samples; engine errors are drops, and so are missed targets
// when dropOnMiss is set.
func (d *peerDriver) Done(r slo.Record) {
	if r.Outcome.Has(slo.Rejected) || r.Outcome.Has(slo.InvalidRequest) || r.OutputTokens == 0 && r.Outcome.Has(slo.ClientCancelled) {
		return
	}
	now := time.Now()
	inflight := d.lim.State().Running + 1 // as it was, before this release
	dropped := r.Outcome.Has(slo.EngineError) || d.dropOnMiss && r.Outcome.Missed()
	d.mu.Lock()
	d.alg.Sample(now, r.E2E-r.QueueWait, inflight, dropped)
	d.applyLocked(now)
	d.mu.Unlock()
}

func (d *peerDriver) applyLocked(now time.Time) {
	l := max(d.alg.Limit(), 1)
	if l != d.lim.State().Limit {
		d.lim.SetLimit(l)
		d.traj.add(now, l)
	}
}

// Run ticks time-driven peers (Envoy's windows) every 100ms.
func (d *peerDriver) Run(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			d.mu.Lock()
			d.alg.Tick(now)
			d.applyLocked(now)
			d.mu.Unlock()
		}
	}
}

// writeState writes the state file a restarted gateway starts from, in a
// directory of its own, and returns its path: the run's State (saved by
// another run, as of now: restarted at once), or its StateCap learnt on
// the run's engine and targets, or none (SaveState: the gateway writes
// it).
func writeState(r Run, engine *endpoint) (string, error) {
	tg := r.Scenario.Targets()
	environ := []string{"KNEECAP_UPSTREAM=http://" + engine.host, "KNEECAP_SLO_TTFT=" + tg.TTFT.String(), "KNEECAP_SLO_TPOT=" + tg.TPOT.String()}
	if tg.E2E > 0 {
		environ = append(environ, "KNEECAP_SLO_E2E="+tg.E2E.String())
	}
	cfg, err := gateway.ConfigFromEnv(append(environ, r.Env...))
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "kneecap-state-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "state.json")
	var st learnt.State
	switch {
	case r.State != nil:
		if err := json.Unmarshal(r.State, &st); err != nil {
			return "", fmt.Errorf("scenario %d: the state to restore: %w", r.Scenario.ID, err)
		}
	case r.StateCap > 0:
		st = learnt.State{Engine: gateway.LearntEngine(cfg), Cap: r.StateCap}
	default:
		return path, nil
	}
	st.SavedAt = time.Now()
	return path, learnt.Save(path, st)
}

// saveState has the gateway write its state file now and returns it.
func saveState(gw *gateway.Gateway, env []string) ([]byte, error) {
	if err := gw.SaveState(); err != nil {
		return nil, err
	}
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "KNEECAP_STATE_FILE="); ok {
			return os.ReadFile(p)
		}
	}
	return nil, errors.New("no state file")
}

// modeSettings are the gateway settings a mode adds to the run's: a static
// cap counts requests only; a budget cap keeps the token budget, as an
// operator's static cap does; a peer runs as at home.
func modeSettings(m Mode) []string {
	switch m.Kind {
	case "static":
		// A count cap as today: the budget in requests only (the token
		// budget is what the adaptive gateway adds, issue 20).
		return []string{"KNEECAP_MAX_CONCURRENCY=" + strconv.Itoa(m.Cap), "KNEECAP_TOKEN_BUDGET=false"}
	case "budget":
		// A static cap as an operator sets one: the token budget on.
		return []string{"KNEECAP_MAX_CONCURRENCY=" + strconv.Itoa(m.Cap)}
	case "peer":
		if slices.Contains(OraclePeers, m.Peer) {
			// vLLM's waiting queue: unbounded in time, bounded by its
			// budget of prompt tokens.
			return []string{"KNEECAP_MAX_QUEUE_WAIT=1h"}
		}
		return []string{"KNEECAP_MAX_QUEUE=0"}
	}
	return nil
}
