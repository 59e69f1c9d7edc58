package reqlog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kneecap/kneecap/reqlog"
	"github.com/kneecap/kneecap/slo"
)

func record(i int) slo.Record {
	return slo.Record{
		Route: "chat", Model: "m", Streamed: true, Status: 200, Tenant: "acme-secret-tenant",
		Arrival: time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC).Add(time.Duration(i) * time.Millisecond),
		TTFT:    250 * time.Millisecond, EngineTTFT: 200 * time.Millisecond, E2E: 1250 * time.Millisecond,
		PromptTokens: 1000 + i, OutputTokens: 11, MaxTokens: 11, OutputChunks: 11,
		Prefix: []uint64{0xabc, uint64(i)},
	}
}

func run(t *testing.T, l *reqlog.Log) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func readLines(t *testing.T, path string) []reqlog.Line {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []reqlog.Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l reqlog.Line
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, l)
	}
	return out
}

func TestLogWritesOneLinePerRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	l, err := reqlog.New(reqlog.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, l)
	refused := slo.Record{Route: "chat", Status: 429, Reason: "queue_full", Outcome: slo.Rejected, PromptEstimate: 77, Arrival: time.Unix(1, 0)}
	late := record(1)
	late.Outcome = slo.MissedTTFT
	for _, r := range []slo.Record{record(0), late, refused} {
		l.Done(r)
	}
	stop()
	lines := readLines(t, path)
	if len(lines) != 3 || l.Written() != 3 {
		t.Fatalf("%d lines (%d written), want 3", len(lines), l.Written())
	}
	g := lines[0]
	if g.Outcome != "good" || g.PromptTokens != 1000 || g.TTFT != 250 || g.EngineTTFT != 200 || g.TPOT != 100 ||
		!g.Arrival.Equal(record(0).Arrival) || len(g.Prefix) != 2 || g.Prefix[0] != "0000000000000abc" {
		t.Errorf("good line: %+v", g)
	}
	if g.Tenant == "" || strings.Contains(g.Tenant, "acme") || g.Tenant != reqlog.HashTenant("acme-secret-tenant") {
		t.Errorf("tenant %q: want the hash of the tenant, never the tenant", g.Tenant)
	}
	if lines[1].Outcome != "late" || lines[1].Missed != "missed_ttft" {
		t.Errorf("late line: %+v", lines[1])
	}
	if r := lines[2]; r.Outcome != "refused" || r.Reason != "queue_full" || r.PromptTokens != 77 || !r.PromptEstimated {
		t.Errorf("refused line: %+v", r)
	}
}

// The log never holds more than (Files + 1) x MaxBytes bytes, and rotated
// files keep the newest lines.
func TestLogRotatesWithinItsBound(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "requests.jsonl")
	const maxBytes, files = 2000, 2
	l, err := reqlog.New(reqlog.Config{Path: path, MaxBytes: maxBytes, Files: files, Buffer: 10})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, l)
	const n = 200
	for i := range n {
		for {
			before := l.Dropped()
			l.Done(record(i))
			if l.Dropped() == before {
				break
			}
			time.Sleep(time.Millisecond) // the queue of 10 was full: offer it again
		}
	}
	stop()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != files+1 {
		t.Errorf("%d files, want %d", len(entries), files+1)
	}
	var total int64
	for _, e := range entries {
		info, _ := e.Info()
		if info.Size() > maxBytes {
			t.Errorf("%s: %d bytes, beyond %d", e.Name(), info.Size(), maxBytes)
		}
		total += info.Size()
	}
	if total > (files+1)*maxBytes {
		t.Errorf("%d bytes in all, beyond the bound", total)
	}
	cur := readLines(t, path)
	if len(cur) == 0 || cur[len(cur)-1].PromptTokens != 1000+n-1 {
		t.Errorf("the current file does not end with the last record")
	}
	older := readLines(t, path+".1")
	if len(older) == 0 || older[len(older)-1].PromptTokens != cur[0].PromptTokens-1 {
		t.Errorf("%s.1 does not hold the lines just before the current file's", path)
	}
}

func TestLogDropsWhenFullWithoutBlocking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	l, err := reqlog.New(reqlog.Config{Path: path, Buffer: 4})
	if err != nil {
		t.Fatal(err)
	}
	// No writer yet: the queue of 4 fills and the rest are dropped at once.
	for i := range 10 {
		l.Done(record(i))
	}
	if l.Dropped() != 6 {
		t.Fatalf("dropped %d, want 6", l.Dropped())
	}
	stop := run(t, l)
	stop()
	if got := len(readLines(t, path)); got != 4 {
		t.Errorf("%d lines, want the 4 queued", got)
	}
	l.Done(record(99)) // after Run: dropped, counted
	if l.Dropped() != 7 {
		t.Errorf("dropped %d after Run ended, want 7", l.Dropped())
	}
}

func TestLogBadPath(t *testing.T) {
	l, err := reqlog.New(reqlog.Config{Path: filepath.Join(t.TempDir(), "no", "such", "dir", "log")})
	if err != nil {
		t.Fatal(err)
	}
	err = l.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "request log") {
		t.Errorf("Run = %v, want an error naming the request log", err)
	}
}
