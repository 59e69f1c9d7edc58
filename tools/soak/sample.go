package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sample is the process and the gateways at one moment.
type sample struct {
	at         time.Duration // since the load started
	final      bool          // taken after the settle, not under load
	rss        uint64        // bytes (VmRSS)
	heap       uint64        // bytes (HeapAlloc, no forced GC)
	goroutines int
	gw         []gwState
	requests   int
	broken     int
	restarts   int64
}

// gwState is one gateway's limiter.
type gwState struct {
	running, queued, limit int
}

// sampler takes a sample every interval and prints one line for each.
type sampler struct {
	s     *soak
	start time.Time
	mu    sync.Mutex
	list  []sample
	lastN int
}

func newSampler(s *soak, start time.Time) *sampler { return &sampler{s: s, start: start} }

func (sp *sampler) loop(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			sp.take(now, false)
		}
	}
}

// final takes the sample after the settle.
func (sp *sampler) final(now time.Time) { sp.take(now, true) }

func (sp *sampler) take(now time.Time, final bool) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	smp := sample{at: now.Sub(sp.start), final: final, rss: rss(), heap: ms.HeapAlloc, goroutines: runtime.NumGoroutine()}
	for _, t := range sp.s.targets {
		st := t.gw.Limiter().State()
		smp.gw = append(smp.gw, gwState{st.Running, st.Queued, st.Limit})
		smp.restarts += t.restarts.Load()
	}
	smp.requests, smp.broken = sp.s.rec.snapshot()
	sp.mu.Lock()
	sp.list = append(sp.list, smp)
	delta := smp.requests - sp.lastN
	sp.lastN = smp.requests
	sp.mu.Unlock()
	sp.printLine(sp.s.out, smp, delta)
}

func (sp *sampler) printHeader(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "%6s  %7s  %8s  %10s", "t", "RSS MiB", "heap MiB", "goroutines")
	for _, t := range sp.s.targets {
		fmt.Fprintf(&b, "  %17s", t.name+" run/queue/cap")
	}
	fmt.Fprintf(&b, "  %8s  %7s  %6s  %8s", "requests", "+last", "broken", "restarts")
	fmt.Fprintln(w, b.String())
}

func (sp *sampler) printLine(w io.Writer, smp sample, delta int) {
	var b strings.Builder
	at := smp.at.Round(time.Second).String()
	if smp.final {
		at = "end"
	}
	fmt.Fprintf(&b, "%6s  %7.1f  %8.1f  %10d", at, mib(smp.rss), mib(smp.heap), smp.goroutines)
	for _, g := range smp.gw {
		fmt.Fprintf(&b, "  %17s", fmt.Sprintf("%d/%d/%d", g.running, g.queued, g.limit))
	}
	fmt.Fprintf(&b, "  %8d  %7s  %6d  %8d", smp.requests, fmt.Sprintf("+%d", delta), smp.broken, smp.restarts)
	fmt.Fprintln(w, b.String())
}

func (sp *sampler) all() []sample {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return append([]sample(nil), sp.list...)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// rss returns the process's resident set size (VmRSS in /proc/self/status),
// 0 if it cannot be read.
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fields := strings.Fields(v) // "12345 kB"
			if len(fields) > 0 {
				kb, err := strconv.ParseUint(fields[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
