package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kneecap/kneecap/bench"
)

// results collects every round of every target, per setting.
type results struct {
	cfg      config
	targets  []string
	settings []setting
	rounds   map[setting]map[string][]roundStats
	twin     map[setting][]roundStats
	loadAvg0 string
	elapsed  time.Duration
}

func newResults(c config, ts []*target) *results {
	r := &results{cfg: c, rounds: map[setting]map[string][]roundStats{}, twin: map[setting][]roundStats{}, loadAvg0: bench.LoadAverage()}
	for _, t := range ts {
		r.targets = append(r.targets, t.name)
	}
	return r
}

func (r *results) add(s setting, target string, rs roundStats) {
	if r.rounds[s] == nil {
		r.rounds[s] = map[string][]roundStats{}
		r.settings = append(r.settings, s)
	}
	r.rounds[s][target] = append(r.rounds[s][target], rs)
}

func (r *results) addTwin(s setting, rs roundStats) { r.twin[s] = append(r.twin[s], rs) }

// summary is one target's numbers at one setting, over all its rounds.
type summary struct {
	p50, p99        time.Duration // time to first chunk, pooled over rounds
	e2e50, e2e99    time.Duration // stream duration, pooled over rounds
	rate            float64       // chunks delivered per second of round wall time
	cpuPerChunk     time.Duration // relay CPU / chunks delivered
	engPerChunk     time.Duration // engine CPU / chunks delivered
	peakRSS         int64         // max over rounds
	heapPerStream   float64       // median over rounds of (heap mid-round - heap before) / streams
	stackPerStream  float64       // median over rounds of (stacks mid-round - before) / streams
	heapSource      string
	allocBytes      float64 // Go relays: bytes allocated per chunk relayed, whole process
	allocObjs       float64 // and allocations per chunk
	haveAllocs      bool
	sysR, sysW      float64 // read-like and write-like system calls per chunk
	broken, streams int
	events          int
	reasons         map[string]int
	roundP50        []time.Duration
}

func summarize(rounds []roundStats) summary {
	var s summary
	var all, e2e []time.Duration
	var wall time.Duration
	var cpu, eng time.Duration
	var heapPS, stackPS []float64
	var allocB, allocN float64
	var allocEvents int
	s.reasons = map[string]int{}
	for _, rs := range rounds {
		all = append(all, rs.ttfc...)
		e2e = append(e2e, rs.e2e...)
		wall += rs.wall
		s.roundP50 = append(s.roundP50, percentile(rs.ttfc, 0.5))
		cpu += rs.cpu
		eng += rs.engineCPU
		s.events += rs.events
		s.sysR += float64(rs.sysR)
		s.sysW += float64(rs.sysW)
		s.broken += rs.broken
		s.streams += rs.streams
		s.peakRSS = max(s.peakRSS, rs.peakRSS)
		if rs.heapMid.source != "" && rs.heapIdle.source == rs.heapMid.source {
			heapPS = append(heapPS, (rs.heapMid.bytes-rs.heapIdle.bytes)/float64(rs.running))
			stackPS = append(stackPS, (rs.heapMid.stack-rs.heapIdle.stack)/float64(rs.running))
			s.heapSource = rs.heapMid.source
		}
		if rs.allocs0.ok && rs.allocs1.ok {
			allocB += rs.allocs1.bytes - rs.allocs0.bytes
			allocN += rs.allocs1.objects - rs.allocs0.objects
			allocEvents += rs.events
		}
		for k, v := range rs.reasons {
			s.reasons[k] += v
		}
	}
	s.p50, s.p99 = percentile(all, 0.5), percentile(all, 0.99)
	s.e2e50, s.e2e99 = percentile(e2e, 0.5), percentile(e2e, 0.99)
	if wall > 0 {
		s.rate = float64(s.events) / wall.Seconds()
	}
	s.cpuPerChunk, s.engPerChunk = perChunk(cpu, s.events), perChunk(eng, s.events)
	if s.events > 0 {
		s.sysR, s.sysW = s.sysR/float64(s.events), s.sysW/float64(s.events)
	}
	s.heapPerStream = median(heapPS)
	s.stackPerStream = median(stackPS)
	if allocEvents > 0 {
		s.allocBytes, s.allocObjs = allocB/float64(allocEvents), allocN/float64(allocEvents)
		s.haveAllocs = true
	}
	return s
}

func (r *results) write(w io.Writer) {
	c := r.cfg
	fmt.Fprintf(w, "# relaybench %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- machine: %d CPUs (GOMAXPROCS %d), %s; load average before %s, after %s\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), r.loadAvg0, bench.LoadAverage())
	fmt.Fprintf(w, "- rounds: %d per target and setting, interleaved (order rotated each round), after one warm-up round; %s in all\n",
		c.rounds, r.elapsed.Round(time.Second))
	if c.unpacedChunks > 0 {
		fmt.Fprintf(w, "- paced: %d chunks per stream, the first at once, then one every interval (per setting); unpaced: back to back, %d chunks per stream, each worker running streams one after another until the round has about %d chunks\n",
			c.chunks, c.unpacedChunks, c.unpacedTotal)
	} else {
		fmt.Fprintf(w, "- paced: %d chunks per stream, the first at once, then one every interval (per setting); unpaced: back to back, %d chunks per round over all streams (at least 100 per stream), one stream per worker\n",
			c.chunks, c.unpacedTotal)
	}
	fmt.Fprintf(w, "- paced streams run as a closed loop: starts spread over one stream's duration, two streams per worker; TTFC and E2E count the second streams, each started while streams-1 others run. Unpaced: the workers start within the paced interval; TTFC and E2E count every stream\n")
	fmt.Fprintf(w, "- TTFC: client request start to the first output chunk's bytes, warm keep-alive connections; added = relay's percentile minus direct's, pooled over rounds; E2E: request start to the stream's end\n")
	fmt.Fprintf(w, "- CPU/chunk: the relay's processes' user+sys CPU during its rounds (/proc/PID/stat, 10 ms ticks) / SSE events delivered to the client; direct: the engine's. syscalls/chunk: read-like + write-like system calls of the relay (/proc/PID/io syscr, syscw) / chunks\n")
	fmt.Fprintf(w, "- peak RSS: max over rounds of the kernel's VmHWM (reset before each round; nginx: master+workers summed). heap/stream (Go relays with pprof): median over paced rounds of (live heap with every stream running - live heap before the round) / streams, live heap = HeapAlloc right after a GC forced by /debug/pprof/heap?gc=1. alloc/chunk: the Go relay's TotalAlloc and Mallocs over its rounds / chunks delivered\n\n")
	for _, s := range r.settings {
		fmt.Fprintf(w, "## %s\n\n", s)
		fmt.Fprintln(w, "| relay | TTFC p50 | TTFC p99 | added p50 | added p99 | added p50 per round | CPU/chunk | syscalls/chunk (r+w) | engine CPU/chunk | chunks/s | E2E p50 | E2E p99 | peak RSS | heap/stream | alloc/chunk | broken |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
		sums := map[string]summary{}
		for _, t := range r.targets {
			sums[t] = summarize(r.rounds[s][t])
		}
		d, hasDirect := sums["direct"]
		for _, t := range r.targets {
			m := sums[t]
			added50, added99, perRound := "-", "-", "-"
			if hasDirect && t != "direct" {
				added50, added99 = fmtMs(m.p50-d.p50), fmtMs(m.p99-d.p99)
				var pr []string
				for i := range min(len(m.roundP50), len(d.roundP50)) {
					pr = append(pr, fmt.Sprintf("%.2f", ms(m.roundP50[i]-d.roundP50[i])))
				}
				perRound = strings.Join(pr, " / ")
			}
			heap := "-"
			if m.heapSource != "" {
				heap = fmtBytes(m.heapPerStream)
			}
			alloc := "-"
			if m.haveAllocs {
				alloc = fmt.Sprintf("%.0f B, %.1f allocs", m.allocBytes, m.allocObjs)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.1f us | %.2f+%.2f | %.1f us | %.0f | %s | %s | %s | %s | %s | %d of %d |\n",
				t, fmtMs(m.p50), fmtMs(m.p99), added50, added99, perRound,
				us(m.cpuPerChunk), m.sysR, m.sysW, us(m.engPerChunk), m.rate, fmtMs(m.e2e50), fmtMs(m.e2e99), fmtBytes(float64(m.peakRSS)), heap, alloc, m.broken, m.streams)
		}
		fmt.Fprintln(w)
		for _, kn := range []string{"kneecap", "kneecap-alt", "rawproxy", "rawedge", "rawconn"} {
			k, ok := sums[kn]
			if !ok {
				continue
			}
			if tw, ok := r.twin[s]; ok && kn == "kneecap" {
				m := summarize(tw)
				if m.heapSource == "pprof-live" {
					fmt.Fprintf(w, "kneecap live heap per running stream: **%s**, plus %s of goroutine stacks (its twin: the same gateway code with pprof, in a round of its own; %s)\n\n",
						fmtBytes(m.heapPerStream), fmtBytes(m.stackPerStream), twinLine(m))
				} else {
					fmt.Fprintf(w, "kneecap twin (the same gateway code with pprof, in a round of its own): %s\n\n", twinLine(m))
				}
			}
			for _, ref := range []string{"revproxy", "nginx"} {
				if m, ok := sums[ref]; ok && hasDirect {
					fmt.Fprintf(w, "%s / %s: CPU/chunk %.2fx, added p50 %s, added p99 %s\n",
						kn, ref, ratio(us(k.cpuPerChunk), us(m.cpuPerChunk)),
						ratioStr(ms(k.p50-d.p50), ms(m.p50-d.p50)), ratioStr(ms(k.p99-d.p99), ms(m.p99-d.p99)))
				}
			}
			fmt.Fprintln(w)
		}
		for _, t := range r.targets {
			if m := sums[t]; len(m.reasons) > 0 {
				fmt.Fprintf(w, "broken streams of %s: %s\n\n", t, fmtReasons(m.reasons))
			}
		}
	}
}

func twinLine(m summary) string {
	return fmt.Sprintf("there CPU/chunk %.1f us, TTFC p50 %s, alloc/chunk %.0f B and %.1f allocs, broken %d of %d",
		us(m.cpuPerChunk), fmtMs(m.p50), m.allocBytes, m.allocObjs, m.broken, m.streams)
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func perChunk(cpu time.Duration, events int) time.Duration {
	if events == 0 {
		return 0
	}
	return cpu / time.Duration(events)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func fmtMs(d time.Duration) string { return fmt.Sprintf("%.2f ms", ms(d)) }

func fmtBytes(b float64) string {
	switch {
	case math.Abs(b) >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	default:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// ratioStr formats a/b; added latencies can be near zero or negative, where
// a ratio means nothing, so those are shown as the two values.
func ratioStr(a, b float64) string {
	if a <= 0.05 || b <= 0.05 {
		return fmt.Sprintf("%.2f ms vs %.2f ms", a, b)
	}
	return fmt.Sprintf("%.2fx (%.2f vs %.2f ms)", a/b, a, b)
}

func fmtReasons(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	var parts []string
	for _, k := range keys[:min(len(keys), 5)] {
		parts = append(parts, fmt.Sprintf("%dx %q", m[k], k))
	}
	return strings.Join(parts, ", ")
}
