package scenarios

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kneecap/kneecap/bench"
)

// TestTrace runs one scenario in one mode and logs every change of the cap
// with its reason, for looking into a run by hand:
//
//	KNEECAP_TRACE=1 KNEECAP_TRACE_SEED=3 go test -run TestTrace -v ./scenarios/
//
// KNEECAP_TRACE_WINDOW sets the measured window (default
// DefaultTiming's); KNEECAP_TRACE_STATE_CAP starts the adaptive gateway
// from a state file holding that cap. KNEECAP_TRACE_MODE is "adaptive"
// (default), a static cap ("static-4"; "budget-4" with the token budget
// on, as an operator's), "engine", or a peer ("peer-envoy-gradient"; an
// oracle peer with its count cap: "peer-vllm-queued-tokens@4").
// KNEECAP_TRACE_RECORDS names a file to write every request's record to, a
// line each (see writeRecords), for comparing two runs request by request.
// Open-loop scenarios take their rate from KNEECAP_TRACE_KNEE (req/s,
// default 0.55). Without KNEECAP_TRACE it skips.
func TestTrace(t *testing.T) {
	v := os.Getenv("KNEECAP_TRACE")
	if v == "" {
		t.Skip("set KNEECAP_TRACE to a scenario ID")
	}
	id, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("KNEECAP_TRACE=%q: not a scenario ID", v)
	}
	var sc Scenario
	for _, s := range All() {
		if s.ID == id {
			sc = s
		}
	}
	var mix *Run // a Mix's variant (KNEECAP_TRACE_MIX: classes, alone or fifo)
	for _, m := range Mixes() {
		if m.ID == id {
			variant := cmp.Or(os.Getenv("KNEECAP_TRACE_MIX"), "classes")
			r := m.run(variant, DefaultTiming, 1)
			mix, sc = &r, r.Scenario
		}
	}
	if sc.ID == 0 {
		t.Fatalf("KNEECAP_TRACE=%d: no such scenario", id)
	}
	seed, _ := strconv.ParseUint(os.Getenv("KNEECAP_TRACE_SEED"), 10, 64)
	mode := Mode{Kind: "adaptive"}
	if m := os.Getenv("KNEECAP_TRACE_MODE"); strings.HasPrefix(m, "static-") || strings.HasPrefix(m, "budget-") {
		kind, n, _ := strings.Cut(m, "-")
		c, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("KNEECAP_TRACE_MODE=%q", m)
		}
		mode = Mode{Kind: kind, Cap: c}
	} else if m == "engine" {
		mode = Mode{Kind: "engine"}
	} else if peer, c, ok := strings.Cut(strings.TrimPrefix(m, "peer-"), "@"); strings.HasPrefix(m, "peer-") {
		mode = Mode{Kind: "peer", Peer: peer}
		if ok { // an oracle peer's count cap: peer-vllm-queued-tokens@4
			if mode.Cap, err = strconv.Atoi(c); err != nil {
				t.Fatalf("KNEECAP_TRACE_MODE=%q", m)
			}
		}
	}
	knee := 0.55
	if k, err := strconv.ParseFloat(os.Getenv("KNEECAP_TRACE_KNEE"), 64); err == nil {
		knee = k
	}
	debugLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() { debugLog = nil }()
	timing := DefaultTiming
	if w, err := time.ParseDuration(os.Getenv("KNEECAP_TRACE_WINDOW")); err == nil {
		timing.Window = w
	}
	clients := bench.ClientsSDK
	if v := os.Getenv("KNEECAP_TRACE_CLIENTS"); v != "" {
		if clients, err = bench.ParseClients(v); err != nil {
			t.Fatal(err)
		}
	}
	if sc.Users == 0 {
		clients = bench.ClientsNext
	}
	run := Run{Scenario: sc, Mode: mode, Timing: sc.timing(timing), KneeCapacity: knee, Seed: max(seed, 1), KeepRecords: true, Clients: clients}
	if mix != nil {
		run.Workload, run.Env, run.Timing, run.Clients = mix.Workload, mix.Env, timing, mix.Clients
	}
	if c, err := strconv.Atoi(os.Getenv("KNEECAP_TRACE_STATE_CAP")); err == nil {
		run.StateCap = c // the cap of a state file the gateway starts from
	}
	if env := os.Getenv("KNEECAP_TRACE_ENV"); env != "" {
		run.Env = strings.Split(env, ",") // gateway settings, KEY=VALUE,...
	}
	if sc.RestoreOf > 0 && run.StateCap == 0 && mode.Kind == "adaptive" {
		// The state a cold run of the scenario restored from saved.
		src, _ := ByID(sc.RestoreOf)
		cold := run
		cold.Scenario, cold.SaveState, cold.KeepRecords = src, true, false
		var res RunResult
		synctest.Test(t, func(t *testing.T) { res, err = cold.execute(t.Context()) })
		if err != nil {
			t.Fatal(err)
		}
		run.State = res.State
		fmt.Fprintf(os.Stderr, "restoring the state of scenario %d: %s\n", src.ID, res.State)
	}
	var res RunResult
	synctest.Test(t, func(t *testing.T) { res, err = run.execute(t.Context()) })
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "goodput %.3f (halves %.3f %.3f), %d good of %d completed, %d rejected, %d errors, %d failed (given up), median E2E %s, held cap %d; caps %s\n",
		res.Goodput, res.Halves[0], res.Halves[1], res.Good, res.Completed, res.Rejected, res.Errors, res.Failed, res.MedianE2E.Round(time.Millisecond), res.HeldCap, trajectoryString(res.Caps))
	for _, class := range slices.Sorted(maps.Keys(res.Classes)) {
		c := res.Classes[class]
		fmt.Fprintf(os.Stderr, "  class %-8s %.3f good req/s: %d good of %d completed, %d rejected\n", class, c.Goodput, c.Good, c.Completed, c.Rejected)
		var ttfts, tpots []time.Duration
		missTTFT, missTPOT := 0, 0
		reasons := map[string]int{}
		for _, rec := range res.Records {
			if rec.Class != class {
				continue
			}
			if rec.Outcome == bench.Rejected {
				reasons[rec.Reason]++
				continue
			}
			if rec.Outcome != bench.Completed {
				continue
			}
			ttfts, tpots = append(ttfts, rec.TTFT), append(tpots, rec.TPOT)
			if rec.Targets.TTFT > 0 && rec.TTFT > rec.Targets.TTFT {
				missTTFT++
			}
			if rec.Targets.TPOT > 0 && rec.TPOT > rec.Targets.TPOT {
				missTPOT++
			}
		}
		slices.Sort(ttfts)
		slices.Sort(tpots)
		q := func(d []time.Duration, p float64) time.Duration {
			if len(d) == 0 {
				return 0
			}
			return d[int(p*float64(len(d)-1))]
		}
		fmt.Fprintf(os.Stderr, "    missed TTFT %d, TPOT %d; TTFT p50 %v p90 %v; TPOT p50 %v p90 %v; refusals %v\n",
			missTTFT, missTPOT, q(ttfts, 0.5).Round(time.Millisecond), q(ttfts, 0.9).Round(time.Millisecond),
			q(tpots, 0.5).Round(time.Millisecond), q(tpots, 0.9).Round(time.Millisecond), reasons)
	}
	traceAttempts(res)
	if path := os.Getenv("KNEECAP_TRACE_RECORDS"); path != "" {
		if err := writeRecords(path, res.Records); err != nil {
			t.Fatal(err)
		}
	}
	if res.Completed == 0 {
		t.Error("nothing completed")
	}
}

// traceAttempts prints what became of each attempt of a request (the
// OpenAI SDKs' retries), the Retry-After the refused ones were told, and
// the gateway's count of the demand it turned away.
func traceAttempts(res RunResult) {
	type key struct {
		attempt int
		outcome string
	}
	n := map[key]int{}
	var ras []time.Duration
	good := map[int]int{}
	for _, rec := range res.Records {
		o := rec.Outcome.String()
		if rec.Outcome == bench.Rejected {
			o += " " + rec.Reason
			ras = append(ras, rec.RetryAfter)
		}
		if rec.GaveUp {
			o += " (gave up)"
		}
		n[key{rec.Attempt, o}]++
		if rec.Good {
			good[rec.Attempt]++
		}
	}
	keys := slices.SortedFunc(maps.Keys(n), func(a, b key) int {
		if a.attempt != b.attempt {
			return a.attempt - b.attempt
		}
		return strings.Compare(a.outcome, b.outcome)
	})
	for _, k := range keys {
		fmt.Fprintf(os.Stderr, "  attempt %d %-32s %d\n", k.attempt, k.outcome, n[k])
	}
	slices.Sort(ras)
	if len(ras) > 0 {
		fmt.Fprintf(os.Stderr, "  good by attempt %v; Retry-After p10 %v p50 %v p90 %v\n", good,
			ras[len(ras)/10].Round(time.Millisecond), ras[len(ras)/2].Round(time.Millisecond), ras[len(ras)*9/10].Round(time.Millisecond))
	}
	fmt.Fprintf(os.Stderr, "  outside: %.2f idle slots, %d returns, %d refused again, %d refused on a last try\n",
		res.Outside.IdleSlots, res.Outside.Returned, res.Outside.RefusedAgain, res.Outside.GaveUp)
}

// writeRecords writes one line per record: when it was due (Unix
// nanoseconds: every run starts at the same virtual instant), attempt,
// outcome and refusal reason, good, measured, prompt and output tokens,
// TTFT and TPOT (microseconds), tab-separated. In open loop a request is
// due at the same instant in every run of a scenario, so the lines of two
// modes join on it.
func writeRecords(path string, recs []bench.Record) error {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%d\t%d\t%s\t%s\t%t\t%t\t%d\t%d\t%d\t%d\n", r.Due.UnixNano(), r.Attempt, r.Outcome, r.Reason,
			r.Good, r.Measured, r.PromptTokens, r.OutputTokens, r.TTFT.Microseconds(), r.TPOT.Microseconds())
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
