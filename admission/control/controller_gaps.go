package control

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// pendingGap is one Loop.Chunk observation that found the loop's lock
// held.
type pendingGap struct {
	at      time.Time
	running int
	kv      int // KV tokens the running requests held (the limiter's count)
	gap     time.Duration
	prefill bool // a prefill was under way during it (see ObserveGap)
}

// gapQueue holds the chunk observations that wait for the loop's lock,
// so that no stream waits for the controller (see Loop.Chunk). Adding
// takes a free shard, and waits only when every shard is being added to at
// that instant; draining runs under the loop's lock, one drain at a time.
type gapQueue struct {
	n      atomic.Int64 // observations waiting; lets a drain skip empty shards
	shards [gapShards]gapShard
}

type gapShard struct {
	mu    sync.Mutex
	q     []pendingGap
	spare []pendingGap // the slice the last drain read, reused by the next
	_     [64]byte     // keeps shards off each other's cache lines
}

func (g *gapQueue) add(p pendingGap) {
	start := rand.Uint32()
	for i := range uint32(gapShards) {
		s := &g.shards[(start+i)%gapShards]
		if s.mu.TryLock() {
			s.push(g, p)
			return
		}
	}
	s := &g.shards[start%gapShards]
	s.mu.Lock()
	s.push(g, p)
}

// push appends p and unlocks the shard.
func (s *gapShard) push(g *gapQueue, p pendingGap) {
	s.q = append(s.q, p)
	g.n.Add(1)
	s.mu.Unlock()
}

// drain passes every waiting observation to f. Calls must not overlap
// (the loop's lock serialises them); adds may run meanwhile.
func (g *gapQueue) drain(f func(pendingGap)) {
	if g.n.Load() == 0 {
		return
	}
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		taken := s.q
		s.q, s.spare = s.spare[:0], taken
		s.mu.Unlock()
		g.n.Add(-int64(len(taken)))
		for _, p := range taken {
			f(p)
		}
	}
}
