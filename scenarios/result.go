package scenarios

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/bench"
)

// CapPoint is the cap from At (time since the run started) on.
type CapPoint struct {
	At  time.Duration `json:"at"`
	Cap int           `json:"cap"`
}

// RunResult is one run of one scenario in one mode.
type RunResult struct {
	Mode string `json:"mode"` // "engine", "static", "adaptive" or a peer's name
	Cap  int    `json:"cap,omitempty"`
	// Goodput is good completions per second over the measured window;
	// Halves splits the window at the scenario's change.
	Goodput float64    `json:"goodput"`
	Halves  [2]float64 `json:"halves"`
	// Thirds splits the window of a scenario whose change is undone
	// (Scenario.Recovers) at the change and at its undoing.
	Thirds [3]float64 `json:"thirds"`
	// Counts over the measured window. Failed counts the requests their
	// clients gave up on (refused or failed on their last attempt; see
	// bench.Clients): errors in someone's application.
	Completed, Good, Rejected, Errors, Failed int
	// Clients is what the closed-loop users did with a refusal
	// (bench.Clients).
	Clients string `json:"clients,omitempty"`
	// Outside is the gateway's count of the demand it turned away over the
	// window (no gateway: zero).
	Outside Outside `json:"outside"`
	// MedianTTFT is the median client TTFT of completed requests,
	// MedianE2E their median E2E (from the attempt's send to the end of
	// its answer).
	MedianTTFT time.Duration `json:"median_ttft"`
	MedianE2E  time.Duration `json:"median_e2e"`
	// HeldCap is the cap an adaptive or peer limit held longest over the
	// window (0: no trajectory).
	HeldCap int `json:"held_cap,omitempty"`
	// Caps is the trajectory of an adaptive or peer limit.
	Caps     []CapPoint `json:"caps,omitempty"`
	FinalCap int        `json:"final_cap,omitempty"`
	// Converge is when the cap last left the band around its final value
	// (from the start); Reconverge the same for the second half, counted
	// from the change. -1 when the run has no trajectory.
	Converge, Reconverge time.Duration
	// Wall is the real time the run took (measured outside its bubble).
	Wall time.Duration `json:"wall"`
	// GoodAt, for a scenario with ColdStart, is when each good request
	// ended (from the start of the run, warm-up included), in order.
	GoodAt []time.Duration `json:"-"`
	// State is the state file the adaptive gateway wrote at the run's
	// end (Run.SaveState).
	State []byte `json:"-"`
	// Classes splits the window's counts by the bench's Request.Class
	// (see mix.go).
	Classes map[string]ClassResult `json:"classes,omitempty"`
	// Records are the window's bench records, kept only when the run asks
	// (Run.KeepRecords: TestTrace).
	Records []bench.Record `json:"-"`
}

// ColdWindow is the span over which a cold start's goodput is judged.
const ColdWindow = 30 * time.Second

// coldConverge returns how long a fresh gateway took to serve near the
// oracle: the start of the first ColdWindow (sliding by a second from the
// run's start) whose good completions per second reach goal, that is the
// moment the goodput over the trailing ColdWindow first reaches goal, less
// the ColdWindow it needs to be measured. -1 if none until end.
func coldConverge(goodAt []time.Duration, goal float64, end time.Duration) time.Duration {
	return reachAfter(goodAt, goal, 0, end, ColdWindow)
}

// DCWindow is the span over which a datacenter scenario's start is
// judged: its first DCWindow at 0.9 of the oracle's goodput must come
// (begin) within DCReach of engine time.
const (
	DCWindow = 10 * time.Second
	DCReach  = 30 * time.Second
)

// goodIn counts the good requests that ended in [from, from+w).
func goodIn(goodAt []time.Duration, from, w time.Duration) int {
	lo, _ := slices.BinarySearch(goodAt, from)
	hi, _ := slices.BinarySearch(goodAt, from+w)
	return hi - lo
}

// ClassResult is one class of requests of a run, over the window.
type ClassResult struct {
	Completed, Good, Rejected int
	// Goodput and CompletedPerSecond are per second of the window.
	Goodput, CompletedPerSecond float64
}

// countClass counts rec to its class; window is the window's length.
func (r *RunResult) countClass(rec bench.Record, window time.Duration) {
	if r.Classes == nil {
		r.Classes = map[string]ClassResult{}
	}
	c := r.Classes[rec.Class]
	switch {
	case rec.Outcome == bench.Completed:
		c.Completed++
		if rec.Good {
			c.Good++
		}
	case rec.Outcome == bench.Rejected:
		c.Rejected++
	}
	if s := window.Seconds(); s > 0 {
		c.Goodput, c.CompletedPerSecond = float64(c.Good)/s, float64(c.Completed)/s
	}
	r.Classes[rec.Class] = c
}

// band is the tolerance around a final cap within which it counts as
// converged: max(1, 10 %).
func band(final int) int { return max(1, int(math.Round(0.1*float64(final)))) }

// heldCap returns the cap in force for the most time between from and to.
func heldCap(caps []CapPoint, from, to time.Duration) int {
	held := map[int]time.Duration{}
	for i, p := range caps {
		end := to
		if i+1 < len(caps) {
			end = min(end, caps[i+1].At)
		}
		if start := max(p.At, from); end > start {
			held[p.Cap] += end - start
		}
	}
	best, bestD := 0, time.Duration(-1)
	for c, d := range held {
		if d > bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	return best
}

// capAt returns the cap in force at t.
func capAt(caps []CapPoint, t time.Duration) int {
	c := 0
	for _, p := range caps {
		if p.At > t {
			break
		}
		c = p.Cap
	}
	return c
}

// convergence returns the cap in force at end and how long after from the
// trajectory entered, for the last time, the band of max(1, 10 %) around it.
func convergence(caps []CapPoint, from, end time.Duration) (final int, after time.Duration) {
	final = capAt(caps, end)
	b := band(final)
	inBand := func(c int) bool { return c >= final-b && c <= final+b }
	entered, wasIn := from, inBand(capAt(caps, from))
	for _, p := range caps {
		if p.At <= from || p.At > end {
			continue
		}
		in := inBand(p.Cap)
		if in && !wasIn {
			entered = p.At
		}
		wasIn = in
	}
	return final, entered - from
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// trajectoryString renders a trajectory as "0s:1 2s:2 ...".
func trajectoryString(caps []CapPoint) string {
	var b strings.Builder
	for i, p := range caps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d", p.At.Round(time.Second), p.Cap)
	}
	return b.String()
}

// Outside is what a gateway counted over a run's window of the demand it
// turned away (admission.OutsideStats).
type Outside struct {
	// IdleSlots is the slot time left idle while demand waited (queued,
	// or refused and expected back) per second of the window: the mean
	// number of slots idle so.
	IdleSlots float64 `json:"idle_slots"`
	// Returned, RefusedAgain and GaveUp count refused requests that came
	// back, refusals of such requests, and refusals on a client's last try.
	Returned, RefusedAgain, GaveUp int64
}

// windowCount takes a gateway's count of the demand it turned away
// (admission.Limiter.Outside) at a window's start and end, each by a timer
// from when it is made; see countWindow.
type windowCount struct {
	count       func() admission.OutsideStats
	window      time.Duration
	start, end  *time.Timer
	mu          sync.Mutex
	first, last admission.OutsideStats
	taken       chan struct{} // closed once last is taken
	once        sync.Once
}

// countWindow starts a windowCount of o's count over the window that
// begins after warmup.
func countWindow(o interface{ Outside() admission.OutsideStats }, warmup, window time.Duration) *windowCount {
	w := &windowCount{count: o.Outside, window: window, taken: make(chan struct{})}
	w.start = time.AfterFunc(warmup, func() {
		c := w.count()
		w.mu.Lock()
		w.first = c
		w.mu.Unlock()
	})
	w.end = time.AfterFunc(warmup+window, w.takeLast)
	return w
}

func (w *windowCount) takeLast() {
	c := w.count()
	w.mu.Lock()
	w.last = c
	w.mu.Unlock()
	w.once.Do(func() { close(w.taken) })
}

// result is the count over the window, once the run has ended. A run ends
// at the window's end, the instant the end's timer fires, and which of the
// two runs first is the scheduler's choice: when the run's end comes
// first, the end is counted now (before, the count at the end was then
// still zero, and the idle slot time over the window came out negative:
// -0.06 slots in scenario 7 of a full sweep, 0.47 alone).
func (w *windowCount) result() Outside {
	if w.end.Stop() {
		w.takeLast()
	}
	<-w.taken
	w.mu.Lock()
	defer w.mu.Unlock()
	return outsideOver(w.first, w.last, w.window)
}

// stop stops the timers of a run that ended without a result.
func (w *windowCount) stop() {
	w.start.Stop()
	w.end.Stop()
}

func outsideOver(a, b admission.OutsideStats, window time.Duration) Outside {
	o := Outside{Returned: b.Returned - a.Returned, RefusedAgain: b.RefusedAgain - a.RefusedAgain, GaveUp: b.GaveUp - a.GaveUp}
	if window > 0 {
		o.IdleSlots = (b.IdleSlotTime - a.IdleSlotTime).Seconds() / window.Seconds()
	}
	return o
}
