package sim

import (
	"testing"
	"time"
)

func testProfile() Profile {
	return Profile{
		Name: "test", Model: "test", MaxNumSeqs: 2, KVCacheTokens: 100, MaxBatchedTokens: 10, MaxModelLen: 50,
		StepBase: 10 * time.Millisecond, StepPerSeq: time.Millisecond, StepPerKVToken: time.Microsecond,
		StepPerPrefillToken: 100 * time.Microsecond, MeanOutputTokens: 4,
	}
}

func TestStepTime(t *testing.T) {
	p := testProfile()
	got := p.StepTime(3, 40, 7)
	want := 10*time.Millisecond + 3*time.Millisecond + 40*time.Microsecond + 700*time.Microsecond
	if got != want {
		t.Fatalf("StepTime = %v, want %v", got, want)
	}
}

// step runs one schedule/commit and returns the planned duration.
func step(t *testing.T, e *engine, now time.Time) time.Duration {
	t.Helper()
	d, ok := e.schedule()
	if !ok {
		t.Fatal("nothing scheduled")
	}
	e.commit(now.Add(d))
	return d
}

func TestChunkedPrefillThenDecode(t *testing.T) {
	p := testProfile()
	e := newEngine(p, nil)
	now := time.Unix(0, 0)
	s := newSeq(15, 3, "length", now)
	e.add(s)
	// Step 1: a 10-token chunk (the budget), no token out yet.
	if d, want := step(t, e, now), p.StepTime(1, 10, 10); d != want {
		t.Fatalf("step 1 = %v, want %v", d, want)
	}
	if s.generated != 0 || s.computed != 10 || e.kvUsed != 10 {
		t.Fatalf("after step 1: generated %d computed %d kv %d", s.generated, s.computed, e.kvUsed)
	}
	// Step 2: the last 5 prompt tokens; the prefill completes and emits the first token.
	if d, want := step(t, e, now), p.StepTime(1, 15, 5); d != want {
		t.Fatalf("step 2 = %v, want %v", d, want)
	}
	if s.out.Load() != 1 {
		t.Fatalf("first token not published: out %d", s.out.Load())
	}
	// Steps 3 and 4 decode one token each; the sequence finishes and frees KV.
	if d, want := step(t, e, now), p.StepTime(1, 16, 0); d != want {
		t.Fatalf("decode step = %v, want %v", d, want)
	}
	step(t, e, now)
	if s.state.Load() != stateDone || s.out.Load() != 3 || len(e.running) != 0 || e.kvUsed != 0 {
		t.Fatalf("end: state %d out %d running %d kv %d", s.state.Load(), s.out.Load(), len(e.running), e.kvUsed)
	}
	if _, ok := e.schedule(); ok {
		t.Fatal("idle engine scheduled a step")
	}
}

func TestMaxNumSeqsAndFCFS(t *testing.T) {
	e := newEngine(testProfile(), nil) // MaxNumSeqs 2
	now := time.Unix(0, 0)
	a, b, c := newSeq(2, 5, "length", now), newSeq(2, 5, "length", now), newSeq(2, 5, "length", now)
	e.add(a)
	e.add(b)
	e.add(c)
	step(t, e, now)
	if len(e.running) != 2 || e.running[0] != a || e.running[1] != b || e.numWaiting() != 1 {
		t.Fatalf("running %d waiting %d", len(e.running), e.numWaiting())
	}
	for a.state.Load() != stateDone {
		step(t, e, now)
	}
	step(t, e, now) // c is admitted once a slot frees
	if e.running[len(e.running)-1] != c || e.numWaiting() != 0 {
		t.Fatalf("c not admitted: running %d waiting %d", len(e.running), e.numWaiting())
	}
}

func TestBudgetSharedByDecodeAndPrefill(t *testing.T) {
	p := testProfile()
	p.MaxNumSeqs = 10
	e := newEngine(p, nil)
	now := time.Unix(0, 0)
	a := newSeq(2, 20, "length", now)
	e.add(a)
	step(t, e, now) // a prefilled, decoding from now on
	b := newSeq(30, 5, "length", now)
	e.add(b)
	// One token for a's decode, 9 for b's first chunk: a long prompt joining
	// the batch makes a's step longer (the prefill stall).
	if d, want := step(t, e, now), p.StepTime(2, 3+9, 9); d != want {
		t.Fatalf("mixed step = %v, want %v", d, want)
	}
	if b.computed != 9 || a.generated != 2 {
		t.Fatalf("b computed %d, a generated %d", b.computed, a.generated)
	}
}

func TestPreemptNewestAndRecompute(t *testing.T) {
	p := testProfile()
	p.KVCacheTokens, p.MaxModelLen, p.MaxBatchedTokens, p.MaxNumSeqs = 20, 20, 20, 4
	var obs countingObserver
	e := newEngine(p, &obs)
	now := time.Unix(0, 0)
	a, b := newSeq(8, 10, "length", now), newSeq(8, 10, "length", now)
	e.add(a)
	e.add(b)
	step(t, e, now) // both prefilled: 16 of 20 KV slots, one token each
	step(t, e, now) // decode: 18
	step(t, e, now) // decode: 20, full
	if e.kvUsed != 20 {
		t.Fatalf("kv %d, want 20", e.kvUsed)
	}
	// a needs a slot: b (the newest) is preempted and queued at the front.
	step(t, e, now)
	if obs.preemptions != 1 || e.preemptions != 1 || len(e.running) != 1 || e.running[0] != a || e.numWaiting() != 1 {
		t.Fatalf("preemptions %d running %d waiting %d", obs.preemptions, len(e.running), e.numWaiting())
	}
	if b.target != 8+3 || b.computed != 0 || b.alloc != 0 {
		t.Fatalf("b target %d computed %d alloc %d, want recompute of prompt + 3 output", b.target, b.computed, b.alloc)
	}
	for a.state.Load() != stateDone {
		step(t, e, now)
	}
	for b.state.Load() != stateDone {
		step(t, e, now)
	}
	if b.out.Load() != 10 || e.kvUsed != 0 {
		t.Fatalf("b out %d kv %d", b.out.Load(), e.kvUsed)
	}
}

func TestCancelledSequenceFreesKV(t *testing.T) {
	e := newEngine(testProfile(), nil)
	now := time.Unix(0, 0)
	a := newSeq(5, 10, "length", now)
	e.add(a)
	step(t, e, now)
	a.cancelled = true
	if _, ok := e.schedule(); ok || e.kvUsed != 0 || len(e.running) != 0 {
		t.Fatalf("cancelled sequence kept: kv %d running %d", e.kvUsed, len(e.running))
	}
}

type countingObserver struct{ first, tokens, done, preemptions int }

func (o *countingObserver) firstToken(*seq, time.Time) { o.first++ }
func (o *countingObserver) token(*seq, time.Duration)  { o.tokens++ }
func (o *countingObserver) finished(*seq, time.Time)   { o.done++ }
func (o *countingObserver) preempted()                 { o.preemptions++ }
