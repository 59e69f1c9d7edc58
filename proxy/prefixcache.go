package proxy

import (
	"math"
	"sync"

	"github.com/kneecap/kneecap/wire"
)

// prefixCache predicts the part of a prompt the engine's prefix cache will
// serve, so that admission charges a request the prefill the engine will
// do (slo.Record.PromptCharged), not its whole prompt. It keeps the
// fingerprints (wire.PromptBlocks) of the prompts the engine recently
// served: a prompt's leading blocks found there are predicted cached, the
// rest not. Two ratios learnt from the engine's usage reports (its cached
// tokens) correct the table, each request weighing estimateDecay of the
// next:
//
//   - kept: of the tokens predicted cached, the share the engine did
//     serve from its cache. It falls when the working set of prefixes no
//     longer fits the engine's cache (the table outlives its evictions),
//     and the charge follows.
//   - extra: of the prompts the table predicted nothing of, the share of
//     tokens the engine served from its cache anyway (prefixes shorter
//     than a block, a cache warmed before the gateway started). Only
//     those: a prompt found in part is served past its last whole block
//     (the engine caches finer), which says nothing of a new prompt.
//
// A request whose prompt predicts p of its estimate e cached is charged
// e - kept x p - extra x (e - p), at least one token.
//
// A table per request rather than one ratio for all: a continued
// conversation whose history is cached and the first turn of a new one
// cost the engine very different prefills, and only the first may need
// to wait. Bounded: at most 2 x cacheTableGen fingerprints, in two
// generations (a lookup promotes nothing; an insert goes to the current
// generation, and a full one becomes the old one, the old one dropped),
// so a client that floods the table with prompts of its own only evicts
// entries, costing others their prediction, not memory.
type prefixCache struct {
	mu       sync.Mutex
	cur, old map[uint64]struct{}
	// decayed sums: tokens predicted cached and of those served cached;
	// tokens not predicted and of those served cached
	pred, kept, rest, extra float64
}

const (
	// cacheBlockTokens is the tokens of a fingerprint block (at the
	// estimate's fixed four characters a token, see blockChars), and
	// cacheMaxBlocks the blocks hashed of a prompt: 32,768 tokens.
	cacheBlockTokens = 256
	cacheMaxBlocks   = 128
	// cacheTableGen is the fingerprints of one generation of the table:
	// two hold 8M tokens of prompts, beyond every engine's KV cache (the
	// kept ratio learns what it evicts).
	cacheTableGen = 1 << 14
)

func newPrefixCache() *prefixCache {
	return &prefixCache{cur: map[uint64]struct{}{}, old: map[uint64]struct{}{}}
}

// cacheBlocks returns the fingerprint of a prompt body whose text
// measured chars: nil for a prompt shorter than a block, which no block
// of the table can match (nothing hashed, nothing allocated).
func cacheBlocks(s wire.Shape, body []byte, chars int) []uint64 {
	size := blockChars(cacheBlockTokens)
	if chars < size {
		return nil
	}
	return wire.PromptBlocks(s, body, size, cacheMaxBlocks, make([]uint64, 0, min(chars/size+1, cacheMaxBlocks)))
}

// predict returns the share of a prompt of chars characters predicted
// cached (its leading blocks in the table), and the tokens of an estimate
// of est tokens to charge.
func (c *prefixCache) predict(blocks []uint64, chars, est int) (share float64, charge int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, h := range blocks {
		if _, ok := c.cur[h]; !ok {
			if _, ok = c.old[h]; !ok {
				break
			}
		}
		n++
	}
	if n > 0 && chars > 0 {
		share = math.Min(float64(n*blockChars(cacheBlockTokens))/float64(chars), 1)
	}
	kept, extra := 1.0, 0.0
	if c.pred > 0 {
		kept = c.kept / c.pred
	}
	if c.rest > 0 {
		extra = c.extra / c.rest
	}
	p := share * float64(est)
	cached := kept*p + extra*(float64(est)-p)
	return share, max(int(float64(est)-cached+0.5), 1)
}

// learn records a served prompt: its blocks, now in the engine's cache,
// and the engine's count of its prompt and cached tokens against the
// share predicted.
func (c *prefixCache) learn(blocks []uint64, share float64, prompt, cached int) {
	if prompt <= 0 || cached < 0 {
		return
	}
	p := share * float64(prompt)
	got := float64(min(cached, prompt))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pred = estimateDecay*c.pred + p
	c.kept = estimateDecay*c.kept + math.Min(got, p)
	if share == 0 {
		c.rest = estimateDecay*c.rest + float64(prompt)
		c.extra = estimateDecay*c.extra + got
	}
	for _, h := range blocks {
		if _, ok := c.cur[h]; ok {
			continue
		}
		if len(c.cur) >= cacheTableGen {
			c.old, c.cur = c.cur, make(map[uint64]struct{}, cacheTableGen)
		}
		c.cur[h] = struct{}{}
	}
}
