package sim

// This file is the unified cache's slots (Profile.UnifiedCache): what an
// ended sequence leaves in its slot, and, with Profile.PrefixCaching,
// llama.cpp's reuse of a slot's previous prompt.

// slot is what an ended sequence left in its slot of the unified cache:
// its computed cells and, with the prefix cache on, the names of its
// prompt's blocks.
type slot struct {
	cells  int
	blocks []uint64
}

// slotSimilarity is llama.cpp's --slot-prompt-similarity default: a prompt
// goes to the idle slot whose previous prompt shares the longest prefix
// with it when that prefix is more than this share of the prompt.
const slotSimilarity = 0.1

// keep puts the n cells of a sequence that ended into the unified cache,
// evicting the oldest beyond Profile.PrefixCacheTokens.
func (e *engine) keep(n int, blocks []uint64) {
	if n <= 0 || e.p.PrefixCacheTokens <= 0 {
		return
	}
	n = min(n, e.p.PrefixCacheTokens)
	e.ended = append(e.ended, slot{cells: n, blocks: blocks})
	e.cached += n
	for e.cached > e.p.PrefixCacheTokens {
		e.evictOldest()
	}
}

func (e *engine) numEnded() int { return len(e.ended) - e.endedHead }

// evictOldest drops the cells of the sequence that ended first.
func (e *engine) evictOldest() {
	e.cached -= e.ended[e.endedHead].cells
	e.ended[e.endedHead] = slot{}
	e.endedHead++
	if e.endedHead >= len(e.ended)/2 {
		n := copy(e.ended, e.ended[e.endedHead:])
		clear(e.ended[n:])
		e.ended, e.endedHead = e.ended[:n], 0
	}
}

// takeSlot gives s the idle slot whose previous prompt shares the longest
// prefix with its own, as llama.cpp's server does when that prefix is more
// than slotSimilarity of the prompt: s keeps the prefix's cells (hit, at
// most all but its last token) and the rest of the slot's are dropped. It
// returns the slot's index in ended and what it held (for giveSlotBack),
// or -1 and no hit when no slot is similar enough (s then takes the slot
// idle longest, as without the prefix cache).
func (e *engine) takeSlot(s *seq) (hit, idx int, taken slot) {
	best, idx := 0, -1
	for i := e.endedHead; i < len(e.ended); i++ {
		b := e.ended[i].blocks
		n := 0
		for n < len(b) && n < len(s.blocks) && b[n] == s.blocks[n] {
			n++
		}
		if n > best {
			best, idx = n, i
		}
	}
	if idx < 0 || float64(best*e.block) <= slotSimilarity*float64(s.prompt) {
		return 0, -1, slot{}
	}
	taken = e.ended[idx]
	hit = min(best*e.block, taken.cells, s.target-1)
	e.cached -= taken.cells
	copy(e.ended[idx:], e.ended[idx+1:])
	e.ended[len(e.ended)-1] = slot{}
	e.ended = e.ended[:len(e.ended)-1]
	s.alloc += hit
	e.kvUsed += hit
	return hit, idx, taken
}

// giveSlotBack undoes takeSlot for a sequence that did not fit after all
// (room evicted nothing on failing, so idx is where the slot was).
func (e *engine) giveSlotBack(s *seq, hit, idx int, taken slot) {
	s.alloc -= hit
	e.kvUsed -= hit
	e.ended = append(e.ended, slot{})
	copy(e.ended[idx+1:], e.ended[idx:])
	e.ended[idx] = taken
	e.cached += taken.cells
}
