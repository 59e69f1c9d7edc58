package wire

// PromptBlocks appends to dst the prefix fingerprint of a request body of
// shape s: the prompt's text (the fields MeasurePrompt reads, media
// skipped) cut into blocks of size bytes, each block's hash chained to
// the one before it (FNV-1a 64 over the previous hash and the block), so
// two prompts share their first k hashes exactly when they share their
// first k blocks of text. The last block may be shorter than size. At
// most max hashes are appended. Strings count as their raw bytes
// (escapes as written), token IDs as the digits of each. A body it cannot
// walk is hashed whole. The text itself is never kept; the hashes are
// stable across processes and runs. size <= 0 or max <= 0 appends
// nothing.
func PromptBlocks(s Shape, body []byte, size, max int, dst []uint64) []uint64 {
	if size <= 0 || max <= 0 {
		return dst
	}
	b := blockHasher{size: size, max: max, out: dst, start: len(dst)}
	b.reset()
	sc := &chunkScan{data: body}
	sc.skipSpace()
	ok := sc.next() == '{' && sc.object(func(name []byte) bool {
		if promptField(s, name) {
			return sc.hashValue(&b, 0)
		}
		return sc.skipValue()
	})
	if !ok {
		b = blockHasher{size: size, max: max, out: dst, start: len(dst)}
		b.reset()
		b.write(body)
	}
	return b.finish()
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// blockHasher chains FNV-1a hashes of fixed-size blocks of bytes.
type blockHasher struct {
	size, max, n, start int
	h, prev             uint64
	out                 []uint64
}

func (b *blockHasher) reset() {
	b.h, b.n = fnvOffset, 0
	for i := 0; i < 8; i++ { // the previous block's hash opens this one
		b.h = (b.h ^ (b.prev >> (8 * i) & 0xff)) * fnvPrime
	}
}

func (b *blockHasher) full() bool { return len(b.out)-b.start >= b.max }

func (b *blockHasher) write(p []byte) {
	for len(p) > 0 && !b.full() {
		k := min(len(p), b.size-b.n)
		h := b.h
		for _, c := range p[:k] {
			h = (h ^ uint64(c)) * fnvPrime
		}
		b.h, b.n, p = h, b.n+k, p[k:]
		if b.n == b.size {
			b.emit()
		}
	}
}

func (b *blockHasher) emit() {
	b.out = append(b.out, b.h)
	b.prev = b.h
	b.reset()
}

func (b *blockHasher) finish() []uint64 {
	if b.n > 0 && !b.full() {
		b.emit()
	}
	return b.out
}

// hashValue feeds the value at the position to b, as measure walks it.
func (s *chunkScan) hashValue(b *blockHasher, depth int) bool {
	if depth > maxPromptDepth {
		return false
	}
	switch c := s.next(); {
	case c == '"':
		start := s.pos
		if _, ok := s.skipString(); !ok {
			return false
		}
		b.write(s.data[start+1 : s.pos-1])
		return true
	case c == '[':
		return s.array(func() bool { return s.hashValue(b, depth+1) })
	case c == '{':
		return s.object(func(name []byte) bool {
			if notText(name) {
				return s.skipValue()
			}
			return s.hashValue(b, depth+1)
		})
	case c == '-' || ('0' <= c && c <= '9'):
		start := s.pos
		if !s.skipNumber() {
			return false
		}
		b.write(s.data[start:s.pos])
		return true
	}
	return s.skipValue()
}
