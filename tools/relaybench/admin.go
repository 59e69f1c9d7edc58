package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// heapSample is the Go heap of a relay at one moment, and where it came from.
type heapSample struct {
	bytes  float64
	stack  float64 // goroutine stacks in use (StackInuse)
	source string  // "pprof-live" (after a forced GC: live objects); empty if unknown
}

// scrapeHeap reads the live Go heap of a relay from its pprof listener:
// /debug/pprof/heap?gc=1 runs a GC first, so HeapAlloc is the live heap.
// (go_memstats_heap_alloc_bytes on a /metrics page would also count the
// garbage not yet collected, which at these allocation rates is larger than
// what the streams hold, so it is not used.)
func scrapeHeap(ctx context.Context, admin string) heapSample {
	body, err := get(ctx, admin+"/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return heapSample{}
	}
	v, ok := findValue(body, "# HeapAlloc = ")
	if !ok {
		return heapSample{}
	}
	st, _ := findValue(body, "# Stack = ") // "# Stack = StackInuse / StackSys"
	return heapSample{bytes: v, stack: st, source: "pprof-live"}
}

// allocCounters are a Go process's cumulative allocation counters.
type allocCounters struct {
	bytes, objects float64
	ok             bool
}

// scrapeAllocs reads TotalAlloc and Mallocs from /debug/pprof/heap?debug=1
// (no forced GC): their difference over a round, divided by the chunks
// relayed, is what the relay allocates per chunk, whole process included.
func scrapeAllocs(ctx context.Context, admin string) allocCounters {
	body, err := get(ctx, admin+"/debug/pprof/heap?debug=1")
	if err != nil {
		return allocCounters{}
	}
	b, ok1 := findValue(body, "# TotalAlloc = ")
	n, ok2 := findValue(body, "# Mallocs = ")
	return allocCounters{b, n, ok1 && ok2}
}

func get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// findValue returns the first number after prefix on the first line that
// starts with it.
func findValue(body, prefix string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			v, err := strconv.ParseFloat(f[0], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// profileRound runs one extra round, not counted, while taking a CPU profile
// of the relay and, for paced streams, a heap profile with every stream
// running, from its admin listener's /debug/pprof.
func profileRound(ctx context.Context, t *target, w workload, dir string, s setting) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Rounds repeat until the profile has its seconds (below).
	secs := 5
	if w.interval > 0 {
		secs = max(secs, int(time.Duration(w.perWorker-w.steadyFrom)*w.stagger/time.Second))
	}
	name := fmt.Sprintf("%s-%d-%s", t.name, s.streams, s.mode)
	errc := make(chan error, 2)
	go func() {
		sleepCtx(ctx, time.Duration(w.steadyFrom)*w.stagger)
		body, err := get(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", t.adminURL, secs))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+"-cpu.pprof"), []byte(body), 0o644)
		}
		errc <- err
	}()
	go func() {
		if w.interval == 0 {
			errc <- nil
			return
		}
		sleepCtx(ctx, w.stagger+w.stagger/2)
		body, err := get(ctx, t.adminURL+"/debug/pprof/heap?gc=1")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+"-heap.pprof"), []byte(body), 0o644)
		}
		errc <- err
	}()
	// Mutex and block profiles are cumulative: save them before and after,
	// for go tool pprof -diff_base.
	save := func(kind, when string) error {
		body, err := get(ctx, t.adminURL+"/debug/pprof/"+kind)
		if err != nil {
			return nil // not every relay samples them
		}
		return os.WriteFile(filepath.Join(dir, name+"-"+kind+"-"+when+".pprof"), []byte(body), 0o644)
	}
	var errs []error
	errs = append(errs, save("mutex", "before"), save("block", "before"))
	runRound(ctx, t.client, t.base, w)
	errs = append(errs, save("mutex", "after"), save("block", "after"))
	// An unpaced round may end before the CPU profile: keep the load on
	// until it has its seconds.
	for i := 0; i < 2; {
		select {
		case err := <-errc:
			errs = append(errs, err)
			i++
		default:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			runRound(ctx, t.client, t.base, w)
		}
	}
	return errors.Join(errs...)
}
