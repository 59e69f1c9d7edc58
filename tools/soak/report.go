package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/kneecap/kneecap/testengine"
)

// report prints the summary and the verdict, and says whether the soak
// passed.
func (s *soak) report(w io.Writer) bool {
	var fails []string
	fmt.Fprintf(w, "\n==== soak summary: %v of load (%s), seed %d, engine fault rate %g, bad-client rate %g ====\n",
		s.loadRan.Round(time.Second), map[bool]string{true: "interrupted", false: "full run"}[s.interrupted], s.cfg.seed, s.cfg.faultRate, s.cfg.badRate)

	total, brokenN := s.rec.snapshot()
	fmt.Fprintf(w, "\nrequests: %d (%.1f/s)\n", total, float64(total)/s.loadRan.Seconds())
	for _, t := range s.targets {
		cl, n := s.rec.byEngine(t.name)
		fmt.Fprintf(w, "  %-8s %7d: complete %d, OpenAI-shaped error %d, client-side %d, BROKEN %d\n",
			t.name, n, cl[classComplete], cl[classError], cl[classClient], cl[classBroken])
	}
	fmt.Fprintf(w, "\nBROKEN responses (neither complete nor an OpenAI-shaped error): %d\n", brokenN)
	for _, t := range s.targets {
		for _, r := range s.rec.rows(t.name, classBroken) {
			fmt.Fprintf(w, "  %-8s %7d  %s\n", t.name, r.n, r.what)
		}
	}
	if len(s.rec.brokens) > 0 {
		fmt.Fprintln(w, "  first broken requests:")
		for _, b := range s.rec.brokens {
			fmt.Fprintf(w, "    %s\n", b)
		}
	}
	if brokenN > 0 {
		fails = append(fails, fmt.Sprintf("%d broken responses", brokenN))
	}

	fmt.Fprintln(w, "\nerrors by cause (status, error.code; SSE: an error event after a 200):")
	for _, t := range s.targets {
		for _, r := range s.rec.rows(t.name, classError) {
			fmt.Fprintf(w, "  %-8s %7d  %s\n", t.name, r.n, r.what)
		}
	}
	fmt.Fprintln(w, "\nclient-side, by kind (the bad clients' own doing):")
	for _, t := range s.targets {
		for _, r := range s.rec.rows(t.name, classClient) {
			fmt.Fprintf(w, "  %-8s %7d  %s\n", t.name, r.n, r.what)
		}
		for _, r := range s.rec.rows(t.name, classComplete) {
			if r.what != "" {
				fmt.Fprintf(w, "  %-8s %7d  complete, %s\n", t.name, r.n, strings.TrimPrefix(r.what, "note: "))
			}
		}
	}
	s.reportBadClients(w)
	s.reportFaults(w)
	s.reportGateways(w)

	// Slots, engines, goroutines.
	fmt.Fprintf(w, "\nafter the load (settled in %v):\n", s.settleTook.Round(time.Millisecond))
	leaked, busy := 0, 0
	for _, r := range s.settled {
		fmt.Fprintf(w, "  %-8s gateway running %d, queued %d; %s\n", r.name, r.running, r.queued, r.engineNote)
		leaked += r.running + r.queued
		busy += r.engineBusy
	}
	fmt.Fprintf(w, "  leaked slots: %d\n", leaked)
	if leaked > 0 {
		fails = append(fails, fmt.Sprintf("%d leaked slots", leaked))
	}
	if busy > 0 {
		fails = append(fails, fmt.Sprintf("%d requests still served by an engine", busy))
	}
	leakedG := max(0, s.after.n-s.before.n)
	fmt.Fprintf(w, "  goroutines: %d before the load, %d after it (waited %v): leaked %d\n",
		s.before.n, s.after.n, s.goroutineWait.Round(time.Millisecond), leakedG)
	if leakedG > 0 {
		fails = append(fails, fmt.Sprintf("%d leaked goroutines", leakedG))
		fmt.Fprintf(w, "  goroutine stacks: %s (before), %s (after)\n", s.goroutineDumps[0], s.goroutineDumps[1])
	}

	// Memory.
	samples := s.samples.all()
	fmt.Fprintf(w, "\nmemory: Go heap %.1f MiB after GC before the load, %.1f MiB after GC at the end\n",
		mib(s.heapBeforeLoad), mib(s.heapEndAfterGC))
	var warm, last *sample
	var under []sample
	for i := range samples {
		if samples[i].final {
			continue
		}
		under = append(under, samples[i])
		if warm == nil && samples[i].at >= s.cfg.warmup {
			warm = &samples[i]
		}
	}
	if len(under) > 0 {
		last = &under[len(under)-1]
	}
	switch {
	case warm == nil || last == nil || warm == last:
		fmt.Fprintf(w, "  RSS: too few samples after the %v warm-up to judge growth\n", s.cfg.warmup)
		if !s.interrupted {
			fails = append(fails, "no RSS samples after the warm-up")
		}
	default:
		growth := float64(last.rss)/float64(warm.rss) - 1
		fmt.Fprintf(w, "  RSS: %.1f MiB at %v (first sample after the %v warm-up), %.1f MiB at %v (last): %+.1f %%\n",
			mib(warm.rss), warm.at.Round(time.Second), s.cfg.warmup, mib(last.rss), last.at.Round(time.Second), 100*growth)
		// The verdict compares medians of a minute of samples at each end:
		// one sample can catch a transient of several MiB (a 4 MiB
		// huge-line event in the gateway's reader, the GC's heap target
		// doubling the live heap), a median cannot.
		first, end := rssWindows(under, s.cfg.warmup, max(time.Minute, s.cfg.sample))
		mg := float64(end)/float64(first) - 1
		slope, peak := rssTrend(under, s.cfg.warmup)
		fmt.Fprintf(w, "  RSS median of the first minute after the warm-up %.1f MiB, of the last minute %.1f MiB: %+.1f %% (bound %+.0f %%)\n",
			mib(first), mib(end), 100*mg, 100*s.cfg.rssBound)
		fmt.Fprintf(w, "  RSS after the warm-up: least-squares trend %+.2f MiB/min, highest sample %.1f MiB\n", slope, mib(peak))
		if mg > s.cfg.rssBound {
			fails = append(fails, fmt.Sprintf("RSS grew %.1f %% after the warm-up (bound %.0f %%)", 100*mg, 100*s.cfg.rssBound))
		}
	}
	s.reportRSSTable(w, samples)

	// Logs.
	warns := s.logs.warnings()
	if len(warns) > 0 {
		fmt.Fprintf(w, "\nwarnings and errors in the log (%s):\n", s.cfg.logPath)
		var rows []countRow
		for k, n := range warns {
			rows = append(rows, countRow{fmt.Sprintf("%-8s %s %s", k.who, k.level, k.msg), n})
		}
		sortRows(rows)
		for i, r := range rows {
			if i == 15 {
				fmt.Fprintf(w, "  ... %d more kinds\n", len(rows)-i)
				break
			}
			fmt.Fprintf(w, "  %7d  %.200s\n", r.n, r.what)
		}
	}
	for _, p := range s.shutdownProblem {
		fails = append(fails, p)
	}

	fmt.Fprintln(w)
	if len(fails) == 0 {
		fmt.Fprintln(w, "soak: PASS")
		return true
	}
	fmt.Fprintf(w, "soak: FAIL (%s)\n", strings.Join(fails, "; "))
	return false
}

// reportFaults prints what the clients saw of each fault injected into the
// uvicorn engine, and the restarts it took.
func (s *soak) reportFaults(w io.Writer) {
	for _, t := range s.targets {
		if t.eng == nil {
			continue
		}
		fmt.Fprintf(w, "\nuvicorn engine: %d restarts after kill faults (%v without a live process in all; %d failed attempts)\n",
			t.restarts.Load(), time.Duration(t.downtime.Load()).Round(time.Millisecond), t.failed.Load())
	}
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	if len(s.rec.faults) == 0 {
		return
	}
	fmt.Fprintln(w, "faults injected into the uvicorn engine (X-Test-Fault), and what a normal client saw:")
	type row struct {
		fault  string
		stream bool
		seen   []countRow
		n      int
	}
	byFault := map[string]*row{}
	for k, n := range s.rec.faults {
		key := fmt.Sprintf("%s/%t", k.fault, k.stream)
		r := byFault[key]
		if r == nil {
			r = &row{fault: k.fault, stream: k.stream}
			byFault[key] = r
		}
		what := k.what
		if k.class == classComplete {
			what = "complete"
		}
		if k.class == classBroken {
			what = "BROKEN: " + what
		}
		r.seen = append(r.seen, countRow{what, n})
		r.n += n
	}
	order := map[string]int{}
	for i, f := range testengine.Faults {
		order[f] = i
	}
	var rows []*row
	for _, r := range byFault {
		sortRows(r.seen)
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].fault != rows[j].fault {
			return order[rows[i].fault] < order[rows[j].fault]
		}
		return rows[i].stream && !rows[j].stream
	})
	for _, r := range rows {
		var seen []string
		for _, c := range r.seen {
			seen = append(seen, fmt.Sprintf("%s x%d", c.what, c.n))
		}
		kind := "streamed"
		if !r.stream {
			kind = "not streamed"
		}
		fmt.Fprintf(w, "  %-20s %-13s %5d: %s\n", r.fault, kind, r.n, strings.Join(seen, ", "))
	}
}

// reportBadClients prints what each kind of bad client saw.
func (s *soak) reportBadClients(w io.Writer) {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	if len(s.rec.bad) == 0 {
		return
	}
	fmt.Fprintln(w, "\nbad clients, by behaviour, and what they saw:")
	for _, t := range s.targets {
		for b := leaveMidStream; b <= slowTrickle; b++ {
			var rows []countRow
			n := 0
			for k, c := range s.rec.bad {
				if k.engine != t.name || k.behavior != b {
					continue
				}
				what := k.what
				switch k.class {
				case classComplete:
					what = "complete"
				case classBroken:
					what = "BROKEN: " + what
				}
				rows = append(rows, countRow{what, c})
				n += c
			}
			if n == 0 {
				continue
			}
			sortRows(rows)
			var parts []string
			for _, r := range rows {
				parts = append(parts, fmt.Sprintf("%s x%d", r.what, r.n))
			}
			fmt.Fprintf(w, "  %-8s %-27s %5d: %s\n", t.name, behaviorNames[b], n, strings.Join(parts, ", "))
		}
	}
}

// reportGateways prints each gateway's own count of outcomes and
// rejections (its Prometheus registry).
func (s *soak) reportGateways(w io.Writer) {
	fmt.Fprintln(w, "\nthe gateways' own counts (kneecap_requests_total by outcome, kneecap_rejections_total by reason, retries):")
	for _, t := range s.targets {
		mfs, err := t.reg.Gather()
		if err != nil {
			fmt.Fprintf(w, "  %s: gather: %v\n", t.name, err)
			continue
		}
		outcomes := map[string]float64{}
		rejections := map[string]float64{}
		var retries float64
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				label := func(name string) string {
					for _, l := range m.GetLabel() {
						if l.GetName() == name {
							return l.GetValue()
						}
					}
					return ""
				}
				switch mf.GetName() {
				case "kneecap_requests_total":
					outcomes[label("outcome")] += m.GetCounter().GetValue()
				case "kneecap_rejections_total":
					rejections[label("reason")] += m.GetCounter().GetValue()
				case "kneecap_upstream_retries_total":
					retries += m.GetCounter().GetValue()
				}
			}
		}
		fmt.Fprintf(w, "  %-8s outcomes: %s\n", t.name, formatCounts(outcomes))
		fmt.Fprintf(w, "  %-8s rejections: %s; retries on a fresh connection: %.0f\n", t.name, formatCounts(rejections), retries)
	}
}

func formatCounts(m map[string]float64) string {
	var rows []countRow
	for k, v := range m {
		rows = append(rows, countRow{k, int(v)})
	}
	sortRows(rows)
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %d", r.what, r.n))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// rssWindows returns the median RSS of the samples in the window after
// the warm-up, and of those in the last window.
func rssWindows(samples []sample, warmup, window time.Duration) (first, last uint64) {
	var a, b []uint64
	end := samples[len(samples)-1].at
	for _, s := range samples {
		if s.at >= warmup && s.at < warmup+window {
			a = append(a, s.rss)
		}
		if s.at > end-window && s.at >= warmup {
			b = append(b, s.rss)
		}
	}
	return median(a), median(b)
}

func median(v []uint64) uint64 {
	if len(v) == 0 {
		return 0
	}
	v = append([]uint64(nil), v...)
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// rssTrend returns the least-squares slope of RSS (MiB per minute) over the
// samples after the warm-up, and the highest of them.
func rssTrend(samples []sample, warmup time.Duration) (slope float64, peak uint64) {
	var n, sx, sy, sxx, sxy float64
	for _, s := range samples {
		if s.at < warmup {
			continue
		}
		x, y := s.at.Minutes(), mib(s.rss)
		n++
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		peak = max(peak, s.rss)
	}
	if d := n*sxx - sx*sx; n >= 2 && d != 0 {
		slope = (n*sxy - sx*sy) / d
	}
	if math.IsNaN(slope) {
		slope = 0
	}
	return slope, peak
}

// reportRSSTable prints RSS, heap and goroutines once a minute (and the
// last samples), for docs/soak.md.
func (s *soak) reportRSSTable(w io.Writer, samples []sample) {
	if len(samples) == 0 {
		return
	}
	every := time.Minute
	if s.loadRan < 5*time.Minute {
		every = max(s.cfg.sample, s.loadRan/5)
	}
	fmt.Fprintln(w, "\n| t | RSS MiB | Go heap MiB | goroutines | requests |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	next := time.Duration(0)
	for i, smp := range samples {
		lastUnder := i+1 < len(samples) && samples[i+1].final
		if smp.final || smp.at >= next || lastUnder {
			at := smp.at.Round(time.Second).String()
			if smp.final {
				at = "end (settled)"
			}
			fmt.Fprintf(w, "| %s | %.1f | %.1f | %d | %d |\n", at, mib(smp.rss), mib(smp.heap), smp.goroutines, smp.requests)
			for next <= smp.at {
				next += every
			}
		}
	}
}
