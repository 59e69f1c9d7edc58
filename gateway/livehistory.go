package gateway

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/kneecap/kneecap/admission/control"
	"github.com/kneecap/kneecap/slo"
)

// The live page's history: one sample of what /status shows every
// historyEvery, the last historyLen of them (ten minutes). A sample reads
// the limiter's state, the window's statistics and the rejection counters,
// as /status and a Prometheus scrape do; nothing is recorded per request or
// per chunk. Every two seconds, not every second: a sample merges the
// window's sketches (about 20 us, BenchmarkLivePage), and the scenario
// suite runs a gateway, and so this sampler, for every cap it tries, in
// virtual time.
const (
	historyEvery = 2 * time.Second
	historyLen   = 300
)

// refusalReasons are the rejection reasons the history keeps apart, in
// the order of its columns; any other reason counts as "other".
var refusalReasons = [...]string{"queue_full", "queue_timeout", "deadline", "shed", "draining", "body_budget", "other"}

// sample is the gateway at one instant, as /status shows it: the cap, the
// requests running and queued, the window's goodput, attainment,
// throughput and percentiles (seconds), the token state, and the requests
// refused since the sample before, by reason (refusalReasons).
type sample struct {
	at                      time.Time
	limit, running, queued  int
	prefillTokens, kvTokens int
	goodput, attainment     float64 // attainment NaN: nothing judged
	throughput              float64
	ttft, tpot              [3]float64 // P50, P90, P99; NaN: none
	refused                 [len(refusalReasons)]int64
}

// history is the ring of samples. Its Run takes them; Snapshot reads them.
// The zero value is not usable; newHistory makes one.
type history struct {
	read func() (sample, map[string]int64) // the state now, and the rejections since start by reason

	mu   sync.Mutex
	ring [historyLen]sample
	n    int64 // samples taken: the next one's sequence number
	last [len(refusalReasons)]int64
}

func newHistory(read func() (sample, map[string]int64)) *history {
	return &history{read: read}
}

// Run takes a sample at once and then every historyEvery until ctx ends.
func (h *history) Run(ctx context.Context) {
	t := time.NewTicker(historyEvery)
	defer t.Stop()
	for {
		h.take()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// take reads the gateway and appends one sample.
func (h *history) take() {
	s, total := h.read()
	var cum [len(refusalReasons)]int64
	for reason, n := range total {
		cum[reasonColumn(reason)] += n
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range cum {
		s.refused[i] = max(cum[i]-h.last[i], 0)
	}
	h.last = cum
	h.ring[h.n%historyLen] = s
	h.n++
}

func reasonColumn(reason string) int {
	for i, r := range refusalReasons[:len(refusalReasons)-1] {
		if r == reason {
			return i
		}
	}
	return len(refusalReasons) - 1
}

// HistoryJSON is the body of /live/history: the samples from sequence
// number First to Next-1, oldest first, one array per field (times in Unix
// seconds, latencies in seconds, null where there was nothing to measure).
// Refused counts the requests refused since the sample before, by reason.
type HistoryJSON struct {
	IntervalSeconds control.Float      `json:"interval_seconds"`
	First           int64              `json:"first"`
	Next            int64              `json:"next"`
	Time            []control.Float    `json:"t"`
	Limit           []int              `json:"limit"`
	Running         []int              `json:"running"`
	Queued          []int              `json:"queued"`
	PrefillTokens   []int              `json:"prefill_tokens"`
	KVTokens        []int              `json:"kv_tokens"`
	Goodput         []control.Float    `json:"goodput"`
	Attainment      []control.Float    `json:"attainment"`
	Throughput      []control.Float    `json:"throughput"`
	TTFT            [3][]control.Float `json:"ttft"` // P50, P90, P99
	TPOT            [3][]control.Float `json:"tpot"`
	Refused         map[string][]int64 `json:"refused"`
}

// Snapshot returns the samples numbered since and later, or every sample
// kept when since is not one of them (negative, too old, or from before a
// restart).
func (h *history) Snapshot(since int64) HistoryJSON {
	h.mu.Lock()
	defer h.mu.Unlock()
	oldest := max(h.n-historyLen, 0)
	if since < oldest || since > h.n {
		since = oldest
	}
	k := int(h.n - since)
	out := HistoryJSON{
		IntervalSeconds: control.Float(historyEvery.Seconds()), First: since, Next: h.n,
		Time: make([]control.Float, 0, k), Limit: make([]int, 0, k), Running: make([]int, 0, k), Queued: make([]int, 0, k),
		PrefillTokens: make([]int, 0, k), KVTokens: make([]int, 0, k),
		Goodput: make([]control.Float, 0, k), Attainment: make([]control.Float, 0, k), Throughput: make([]control.Float, 0, k),
		Refused: make(map[string][]int64, len(refusalReasons)),
	}
	for q := range 3 {
		out.TTFT[q], out.TPOT[q] = make([]control.Float, 0, k), make([]control.Float, 0, k)
	}
	for _, r := range refusalReasons {
		out.Refused[r] = make([]int64, 0, k)
	}
	for i := since; i < h.n; i++ {
		s := &h.ring[i%historyLen]
		out.Time = append(out.Time, control.Float(float64(s.at.UnixMilli())/1000))
		out.Limit, out.Running, out.Queued = append(out.Limit, s.limit), append(out.Running, s.running), append(out.Queued, s.queued)
		out.PrefillTokens, out.KVTokens = append(out.PrefillTokens, s.prefillTokens), append(out.KVTokens, s.kvTokens)
		out.Goodput = append(out.Goodput, control.Float(s.goodput))
		out.Attainment = append(out.Attainment, control.Float(s.attainment))
		out.Throughput = append(out.Throughput, control.Float(s.throughput))
		for q := range 3 {
			out.TTFT[q] = append(out.TTFT[q], control.Float(s.ttft[q]))
			out.TPOT[q] = append(out.TPOT[q], control.Float(s.tpot[q]))
		}
		for j, r := range refusalReasons {
			out.Refused[r] = append(out.Refused[r], s.refused[j])
		}
	}
	return out
}

// liveSample reads the gateway for the history: the numbers /status shows
// of the limiter and the window, and the rejection counters. The page
// reads the controller's state from /status itself.
func (g *Gateway) liveSample() (sample, map[string]int64) {
	st := g.lim.State()
	ws := g.win.Stats(st.Now)
	s := sample{
		at: st.Now, limit: st.Limit, running: st.Running, queued: st.Queued,
		prefillTokens: st.PrefillTokens, kvTokens: st.ResidentKV,
		goodput: ws.Goodput, attainment: math.NaN(), throughput: ws.Throughput,
		ttft: percentiles(ws.TTFT), tpot: percentiles(ws.TPOT),
	}
	if ws.Judged > 0 {
		s.attainment = ws.Attainment
	}
	return s, g.metrics.rejectedByReason()
}

// percentiles is P50, P90 and P99 in seconds, NaN when nothing was measured.
func percentiles(q slo.Quantiles) [3]float64 {
	if q.Count == 0 {
		return [3]float64{math.NaN(), math.NaN(), math.NaN()}
	}
	return [3]float64{q.P50.Seconds(), q.P90.Seconds(), q.P99.Seconds()}
}
