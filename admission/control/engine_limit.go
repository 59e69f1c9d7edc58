package control

import (
	"math"
	"time"
)

// engineLimit is the engine's own limit on requests it runs at once, as its
// metrics show it: llama.cpp's slots, vLLM's max_num_seqs or KV memory.
// Past it the engine queues what the gateway forwards, where neither the
// deadline check nor priorities reach, and every first token waits for a
// slot: the cap is never worth holding above it. It is seen when the engine
// reports requests waiting while it runs the same number of them, fewer
// than the gateway forwarded, at engineLimitReadings readings in a row (a
// request that arrives during a long step waits for the next one: a single
// reading of a waiting request says nothing). It is forgotten when the
// engine runs more, or after engineLimitMemory without being seen again.
type engineLimit struct {
	n      int       // the limit; 0: none seen
	seenAt time.Time // when it was last seen
	run    int       // the engine's running count over the current streak
	streak int
	// most is the most the engine was seen running, and when: a limit is
	// never below it (a reading between a request's end and the next
	// one's admission shows one fewer running while another waits).
	most   int
	mostAt time.Time
}

func (e *engineLimit) observe(now time.Time, r EngineReading, forwarded int) {
	if !finite(r.Running) || !finite(r.Waiting) {
		e.streak = 0
		return
	}
	run := int(math.Round(r.Running))
	if e.n > 0 && run > e.n {
		e.n = 0 // it runs more than that: not its limit
	}
	if run >= e.most || now.Sub(e.mostAt) >= engineLimitMemory {
		e.most, e.mostAt = run, now
	}
	if e.n > 0 && run == e.n {
		e.seenAt = now // running at its limit: still the limit
	}
	if r.Waiting < 1 || run < 1 || run >= forwarded {
		e.streak = 0
		return
	}
	if e.streak == 0 || run != e.run {
		e.run, e.streak = run, 0
	}
	e.streak++
	if e.streak >= engineLimitReadings {
		e.n, e.seenAt = max(run, e.most), now
	}
}

// at returns the limit if one was seen within engineLimitMemory.
func (e *engineLimit) at(now time.Time) (int, bool) {
	if e.n > 0 && now.Sub(e.seenAt) < engineLimitMemory {
		return e.n, true
	}
	return 0, false
}

// waitedInEngine reports whether f may have waited in the engine's own
// queue for a slot: granted while the gateway had more requests on the
// engine than the engine runs at most (its limit, known now, perhaps
// learnt only after the grant). Its engine TTFT then holds that wait, a
// whole generation's time at worst, which is no prefill: taken for one,
// it made every prefill look slower and the deadline check refuse what
// the engine would have served in time.
func (c *Controller) waitedInEngine(now time.Time, f Finished) bool {
	n, ok := c.limit.at(now)
	return ok && f.GrantRunning > n
}

// engineBound is the highest cap the engine's own limit allows (MaxCap
// when none is known).
func (c *Controller) engineBound(now time.Time) int {
	if n, ok := c.limit.at(now); ok {
		return max(n, c.cfg.MinCap)
	}
	return c.cfg.MaxCap
}
