package sim

import (
	"slices"
	"sync/atomic"
	"time"
)

// Stream states of a sequence, as the handler reads them.
const (
	stateRunning int32 = iota
	stateDone          // all output tokens are published
	stateAborted       // the engine stopped before the sequence finished
)

// seq is one request inside the engine. The fields above the line belong to
// the scheduler (read and written under Sim.mu); the atomics below it are
// how the scheduler hands tokens to the request's handler without a lock.
type seq struct {
	prompt  int       // prompt tokens
	maxOut  int       // output tokens to generate
	reason  string    // finish_reason once maxOut tokens are out: "length" or "stop"
	arrival time.Time // when the request arrived (TTFT and E2E count from here)

	target    int // tokens to compute before decoding: the prompt, plus the output so far after a preemption
	computed  int // tokens whose KV is in the cache
	alloc     int // KV slots held
	generated int // output tokens produced
	firstAt   time.Time
	lastToken time.Time
	cancelled bool // the client left; removed at the next step
	finished  bool
	// blocks name the full blocks of the prompt and of the answer so far
	// (Profile.PrefixCaching), as hasher names them; refs are the cached
	// blocks the sequence holds, blocks[:len(refs)].
	blocks []uint64
	hasher *prefixHasher
	refs   []*pblock
	// cached is the prompt tokens its first admission found in the
	// prefix cache (what usage reports); looked is whether it was looked up.
	cached int
	looked bool

	out   atomic.Int32  // output tokens published to the handler
	state atomic.Int32  // stateRunning, stateDone, stateAborted
	ready chan struct{} // capacity 1: "out or state changed"
	// due is when the handler may deliver what it was woken for (Unix
	// nanoseconds; see Config.Stagger), set before each wake-up.
	due atomic.Int64
}

func newSeq(prompt, maxOut int, reason string, arrival time.Time) *seq {
	return &seq{prompt: prompt, maxOut: maxOut, reason: reason, arrival: arrival, target: prompt, ready: make(chan struct{}, 1)}
}

// notify wakes the handler without blocking; one pending wake-up is enough
// because the handler reads the latest counts when it wakes.
func (s *seq) notify() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// work is one sequence's share of a step: n tokens (a prefill chunk, or 1
// to decode).
type work struct {
	s *seq
	n int
}

// observer receives what the engine does, for metrics. A nil observer is
// allowed in tests.
type observer interface {
	firstToken(s *seq, now time.Time)
	token(s *seq, itl time.Duration)
	finished(s *seq, now time.Time)
	preempted()
}

// engine is the continuous-batching scheduler and the step model: pure
// state, no goroutines, time passed in. Not safe for concurrent use.
type engine struct {
	p        Profile
	obs      observer
	waiting  []*seq // FCFS; preempted sequences go back to the front
	head     int    // waiting[head:] is the queue
	incoming []*seq // arrived since the last schedule, not yet in waiting
	running  []*seq // in admission order; the last one is preempted first
	kvUsed   int
	// pc is the hashed prefix cache (Profile.PrefixCaching); nil when off
	// or the cache is the unified one, whose slots serve prefixes instead.
	// kvUsed leaves out what its blocks hold. block is the prefix cache's
	// block size, 0 when it is off.
	pc    *prefixCache
	block int
	// cached is how many tokens of finished sequences the prefix cache
	// holds (Profile.PrefixCacheTokens).
	cached int
	// ended are what each ended sequence left in its slot of the unified
	// cache (Profile.UnifiedCache), oldest first from endedHead; their cells sum to
	// cached. Unused otherwise.
	ended     []slot
	endedHead int
	batch     []work
	// admittedAt is the latest arrival among the sequences the last
	// schedule admitted: the step cannot have started before it.
	admittedAt time.Time
	// stagger spaces the deliveries of one step (Config.Stagger).
	stagger time.Duration

	steps       int64
	preemptions int64
}

func newEngine(p Profile, obs observer) *engine {
	return &engine{p: p, obs: obs}
}

func (e *engine) numWaiting() int { return len(e.waiting) - e.head + len(e.incoming) }

func (e *engine) add(s *seq) { e.incoming = append(e.incoming, s) }

// admitIncoming moves new arrivals to the back of the queue in arrival
// order. Requests that arrived at the same instant (common in virtual time)
// are ordered by their size, so that the order does not depend on which
// handler goroutine ran first; requests of equal size are interchangeable.
func (e *engine) admitIncoming() {
	if len(e.incoming) == 0 {
		return
	}
	slices.SortStableFunc(e.incoming, func(a, b *seq) int {
		if c := a.arrival.Compare(b.arrival); c != 0 {
			return c
		}
		if a.prompt != b.prompt {
			return a.prompt - b.prompt
		}
		return a.maxOut - b.maxOut
	})
	e.waiting = append(e.waiting, e.incoming...)
	clear(e.incoming)
	e.incoming = e.incoming[:0]
}

func (e *engine) pushFront(s *seq) {
	if e.head > 0 {
		e.head--
		e.waiting[e.head] = s
		return
	}
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = s
}

// sweep drops cancelled sequences and frees their KV slots (in the
// unified cache a running one leaves its cells in its slot, as a finished
// one does).
func (e *engine) sweep() {
	e.dropRunning(func(s *seq) bool {
		if s.cancelled && e.p.UnifiedCache && s.alloc > 0 {
			e.keep(s.alloc, s.blocks)
		}
		return s.cancelled
	})
	q := e.waiting[e.head:]
	kq := q[:0]
	for _, s := range q {
		if !s.cancelled {
			kq = append(kq, s)
		}
	}
	clear(q[len(kq):])
	e.waiting = e.waiting[:e.head+len(kq)]
	if e.head > 0 && e.head >= len(e.waiting)/2 {
		n := copy(e.waiting, e.waiting[e.head:])
		clear(e.waiting[n:])
		e.waiting = e.waiting[:n]
		e.head = 0
	}
}

// preemptLast takes the newest running sequence off the batch, frees its KV
// cache and puts it at the front of the queue, to be recomputed: its prompt
// and the output it already produced are prefilled again.
func (e *engine) preemptLast() *seq {
	v := e.running[len(e.running)-1]
	e.running[len(e.running)-1] = nil
	e.running = e.running[:len(e.running)-1]
	e.kvUsed -= v.alloc
	v.alloc, v.computed = 0, 0
	if e.pc != nil {
		e.pc.release(v)
	}
	v.target = v.prompt + v.generated
	e.pushFront(v)
	e.preemptions++
	if e.obs != nil {
		e.obs.preempted()
	}
	return v
}

// schedule plans the next step and returns its modelled duration; ok is
// false when there is nothing to run. The plan is e.batch, until commit.
//
// As vLLM's scheduler: running sequences first, in admission order, each
// decoding one token or prefilling a chunk within the token budget; when KV
// cache runs out, the newest running sequence is preempted. Then, if nothing
// was preempted, waiting sequences are admitted in FCFS order while there is
// budget, a free sequence slot and KV cache for their whole prompt.
func (e *engine) schedule() (d time.Duration, ok bool) {
	e.admitIncoming()
	e.sweep()
	e.batch = e.batch[:0]
	e.admittedAt = time.Time{}
	if e.pc != nil {
		e.pc.stepQueries, e.pc.stepHits = 0, 0
	}
	budget := e.p.MaxBatchedTokens
	preempted := false
	kvAttended, prefill := 0, 0
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		need := 1
		if s.computed < s.target {
			need = min(s.target-s.computed, budget)
		}
		for !e.room(need) && i < len(e.running) {
			e.preemptLast()
			preempted = true
		}
		if i >= len(e.running) { // s itself was preempted
			break
		}
		s.alloc += need
		e.kvUsed += need
		budget -= need
		if s.computed < s.target {
			prefill += need
		}
		kvAttended += s.computed + need
		e.batch = append(e.batch, work{s, need})
	}
	for !preempted && budget > 0 && e.numWaiting() > 0 && len(e.running) < e.p.MaxNumSeqs {
		s := e.waiting[e.head]
		hit, idx, taken := 0, -1, slot{}
		switch {
		case e.pc != nil:
			hit = e.pc.lookup(s)
		case e.block > 0: // the unified cache's slots
			hit, idx, taken = e.takeSlot(s)
		}
		if !e.room(s.target - hit) {
			switch {
			case e.pc != nil:
				e.pc.release(s)
			case idx >= 0:
				e.giveSlotBack(s, hit, idx, taken)
			}
			break // FCFS: the head waits for memory, and so does everyone behind it
		}
		if e.pc != nil {
			e.pc.count(s.target, hit)
		}
		if !s.looked {
			s.looked, s.cached = true, hit
		}
		s.computed = hit
		if e.p.UnifiedCache {
			// The new sequence takes the slot idle longest, dropping what
			// the sequence that ended there left.
			for e.numEnded() > 0 && e.numEnded()+len(e.running) >= e.p.MaxNumSeqs {
				e.evictOldest()
			}
		}
		e.waiting[e.head] = nil
		e.head++
		need := min(s.target-hit, budget)
		s.alloc += need
		e.kvUsed += need
		budget -= need
		prefill += need
		kvAttended += hit + need
		if s.arrival.After(e.admittedAt) {
			e.admittedAt = s.arrival
		}
		e.running = append(e.running, s)
		e.batch = append(e.batch, work{s, need})
	}
	if len(e.batch) == 0 {
		return 0, false
	}
	return e.p.CachedStepTime(len(e.batch), kvAttended, prefill, e.cached), true
}

// commit applies the planned step at now: prefill chunks become KV cache, a
// sequence whose prefill completes and every decoding sequence produce one
// token, and finished sequences leave the batch.
func (e *engine) commit(now time.Time) {
	e.steps++
	anyDone := false
	for i, w := range e.batch {
		s := w.s
		if s.cancelled {
			continue
		}
		s.computed += w.n
		if e.pc != nil && len(s.refs) < len(s.blocks) {
			e.register(s)
		}
		if s.computed < s.target {
			continue // a prefill chunk that is not the last
		}
		s.generated++
		if s.generated == 1 {
			s.firstAt = now
			if e.obs != nil {
				e.obs.firstToken(s, now)
			}
		} else if e.obs != nil {
			e.obs.token(s, now.Sub(s.lastToken))
		}
		s.lastToken = now
		if s.hasher != nil {
			s.hashOutput()
		}
		s.out.Store(int32(s.generated))
		if s.generated >= s.maxOut {
			s.finished = true
			anyDone = true
			if e.p.UnifiedCache {
				e.keep(s.alloc, s.blocks) // the cells computed: the last token is never fed back
			} else {
				e.cached = min(e.p.PrefixCacheTokens, e.cached+s.prompt+s.generated)
			}
			if e.obs != nil {
				e.obs.finished(s, now)
			}
			s.state.Store(stateDone)
		}
		s.due.Store(now.Add(time.Duration(i) * e.stagger).UnixNano())
		s.notify()
	}
	clear(e.batch)
	e.batch = e.batch[:0]
	if anyDone {
		e.dropRunning(func(s *seq) bool { return s.finished })
	}
}

// dropRunning removes the running sequences for which drop is true, in
// place, and frees their KV slots.
func (e *engine) dropRunning(drop func(*seq) bool) {
	keep := e.running[:0]
	for _, s := range e.running {
		if drop(s) {
			e.kvUsed -= s.alloc
			s.alloc = 0
			if e.pc != nil {
				e.pc.release(s)
			}
			continue
		}
		keep = append(keep, s)
	}
	clear(e.running[len(keep):])
	e.running = keep
}

// abortAll ends every sequence in the engine; their handlers report an error.
func (e *engine) abortAll() {
	for _, s := range e.running {
		s.state.Store(stateAborted)
		s.notify()
	}
	for _, s := range e.waiting[e.head:] {
		s.state.Store(stateAborted)
		s.notify()
	}
	for _, s := range e.incoming {
		s.state.Store(stateAborted)
		s.notify()
	}
	clear(e.incoming)
	e.incoming = e.incoming[:0]
	clear(e.running)
	e.running = e.running[:0]
	clear(e.waiting)
	e.waiting, e.head, e.kvUsed = e.waiting[:0], 0, 0
}

// room reports whether need more KV slots fit beside the running
// sequences. In the unified cache the cells ended sequences left count too,
// and room evicts them, oldest first, as far as that makes the need fit;
// it evicts nothing when even an empty cache would not.
func (e *engine) room(need int) bool {
	if e.pc != nil {
		held := e.kvUsed + e.pc.pinned
		if held+need > e.p.KVCacheTokens {
			return false
		}
		for held+e.pc.free+need > e.p.KVCacheTokens {
			e.pc.evictOne()
		}
		return true // Validate keeps it apart from the unified cache
	}
	if e.kvUsed+need > e.p.KVCacheTokens {
		return false
	}
	if !e.p.UnifiedCache {
		return true
	}
	for e.kvUsed+e.cached+need > e.p.KVCacheTokens {
		e.evictOldest()
	}
	return true
}

// flush drops every cached cell and returns how many there were.
func (e *engine) flush() int {
	n := e.cached
	e.cached, e.ended, e.endedHead = 0, e.ended[:0], 0
	if e.pc != nil {
		n += e.pc.flush()
	}
	return n
}

// cachedTokens are the resident tokens of sequences that ended: the
// resident-token model's and the hashed cache's free blocks.
func (e *engine) cachedTokens() int {
	if e.pc != nil {
		return e.cached + e.pc.free
	}
	return e.cached
}
