package sim

import "strings"

// This file is the hashed prefix cache (Profile.PrefixCaching): vLLM's
// automatic prefix caching, and SGLang's radix cache approximated by small
// blocks. A prompt is cut into blocks of a fixed number of tokens; each
// full block is named by a hash of every token up to its end (a chain), so
// two prompts share a block exactly when they share everything before it.
// The engine owns the cache and changes it only under Sim.mu.

// FNV-1a's 64-bit constants: words and token IDs are hashed with them.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// prefixHasher names the full blocks of a prompt as its tokens stream by:
// cur is a running hash of every token so far, and its value at each
// block's end is that block's name.
type prefixHasher struct {
	size int
	n    int // tokens in the block being filled
	cur  uint64
	out  []uint64
}

func newPrefixHasher(size int) *prefixHasher {
	return &prefixHasher{size: size, cur: fnvOffset}
}

// token adds one token, given by its own hash.
func (h *prefixHasher) token(t uint64) {
	h.cur = (h.cur ^ t) * fnvPrime
	if h.n++; h.n == h.size {
		h.out = append(h.out, h.cur)
		h.n = 0
	}
}

// word adds one word of a text prompt.
func (h *prefixHasher) word(s string) { h.token(wordHash(s)) }

func wordHash(s string) uint64 {
	w := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		w = (w ^ uint64(s[i])) * fnvPrime
	}
	return w
}

// answerWords[k] is the hash of the word of the simulated answer that
// ends with output token k (mod len(words)) if the answer stops there:
// a client that sends the answer back in its next turn sends these words
// (" dog" and "." make one word, "dog.").
var answerWords = func() (h [len(words)]uint64) {
	cur := ""
	for k, w := range words {
		if w[0] == ' ' {
			cur = ""
		}
		cur += strings.TrimLeft(w, " ")
		h[k] = wordHash(cur)
	}
	return h
}()

// hashOutput names the answer's blocks as its tokens come, word by word
// as the simulator's tokenizer reads the answer sent back: a word is
// named when the next token starts another, or when the answer ends. So
// the next turn of a conversation (this prompt, this answer, a new
// question) finds both cached, as vLLM and SGLang cache the blocks of
// generated tokens too.
func (s *seq) hashOutput() {
	j := s.generated - 1
	if j > 0 && words[j%len(words)][0] == ' ' {
		s.hasher.token(answerWords[(j-1)%len(words)])
	}
	if s.generated >= s.maxOut {
		s.hasher.token(answerWords[j%len(words)])
	}
	s.blocks = s.hasher.out
}

// pblock is one cached block. A block with ref > 0 is held by running
// sequences (pinned); with ref 0 it sits in the free list, evictable, least
// recently freed first.
type pblock struct {
	hash       uint64
	ref        int
	prev, next *pblock
}

// prefixCache is the set of cached blocks and their accounting, in tokens:
// pinned (held by running sequences) and free (left by sequences that
// ended, kept until evicted). A sequence's KV in the engine's kvUsed is the
// part not in a cached block: its unfinished last block and its output.
type prefixCache struct {
	size         int
	blocks       map[uint64]*pblock
	head, tail   *pblock // the free list
	pinned, free int

	queries, hits int64 // prompt tokens looked up and found, since start
	// stepQueries and stepHits are those of the sequences admitted by
	// the last schedule (SGLang's hit rate is per prefill batch).
	stepQueries, stepHits int
}

func newPrefixCache(size int) *prefixCache {
	return &prefixCache{size: size, blocks: map[uint64]*pblock{}}
}

func (c *prefixCache) unlink(b *pblock) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		c.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next = nil, nil
}

func (c *prefixCache) pushFree(b *pblock) {
	b.prev, b.next = c.tail, nil
	if c.tail != nil {
		c.tail.next = b
	} else {
		c.head = b
	}
	c.tail = b
}

// hold takes one more reference to b.
func (c *prefixCache) hold(b *pblock) {
	if b.ref == 0 {
		c.unlink(b)
		c.free -= c.size
		c.pinned += c.size
	}
	b.ref++
}

// lookup pins the longest cached prefix of s's blocks and returns
// its tokens (count records it once s is admitted). At least one token is left to compute (its logits give the
// first output), as in vLLM.
func (c *prefixCache) lookup(s *seq) int {
	limit := min(len(s.blocks), (s.target-1)/c.size)
	n := 0
	for n < limit {
		b := c.blocks[s.blocks[n]]
		if b == nil {
			break
		}
		c.hold(b)
		s.refs = append(s.refs, b)
		n++
	}
	return n * c.size
}

// count records the lookup of an admitted sequence: queried tokens, hit of
// them in the cache.
func (c *prefixCache) count(queried, hit int) {
	c.queries += int64(queried)
	c.hits += int64(hit)
	c.stepQueries += queried
	c.stepHits += hit
}

// release drops s's references, last block first, so that a prompt's tail
// is evicted before its head.
func (c *prefixCache) release(s *seq) {
	for i := len(s.refs) - 1; i >= 0; i-- {
		b := s.refs[i]
		if b.ref--; b.ref == 0 {
			c.pinned -= c.size
			c.free += c.size
			c.pushFree(b)
		}
	}
	clear(s.refs)
	s.refs = s.refs[:0]
}

// evictOne drops the block freed longest ago; there must be one.
func (c *prefixCache) evictOne() {
	b := c.head
	c.unlink(b)
	delete(c.blocks, b.hash)
	c.free -= c.size
}

// flush drops every free block and returns their tokens.
func (c *prefixCache) flush() int {
	n := c.free
	for c.head != nil {
		c.evictOne()
	}
	return n
}

// register puts the blocks s has computed since its last call into
// the cache (or shares a copy another sequence put there meanwhile); their
// tokens leave s's own KV for the cache's.
func (e *engine) register(s *seq) {
	c := e.pc
	full := min(s.computed/c.size, len(s.blocks))
	for i := len(s.refs); i < full; i++ {
		h := s.blocks[i]
		b := c.blocks[h]
		if b == nil {
			b = &pblock{hash: h, ref: 1}
			c.blocks[h] = b
			c.pinned += c.size
		} else {
			c.hold(b)
		}
		s.refs = append(s.refs, b)
		s.alloc -= c.size
		e.kvUsed -= c.size
	}
}
