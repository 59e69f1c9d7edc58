package wire

import "encoding/binary"

// PromptBlocks appends to dst the prefix fingerprint of a request body of
// shape s: the prompt's text (the fields MeasurePrompt reads, media
// skipped) cut into blocks of size bytes, each block's hash chained to
// the one before it (a 64-bit multiply-and-shift hash over the previous
// hash and the block's bytes), so
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
	hashOffset = 14695981039346656037 // FNV-1a's offset basis
	hashMul    = 0x9e3779b97f4a7c15   // odd: a bijection on uint64
)

// blockHasher chains hashes of fixed-size blocks of bytes. Within a block
// it mixes eight bytes at a time (a multiply and a shift each), carrying
// a partial word across writes, so a block's hash depends on its bytes
// alone, not on how they were split into JSON strings.
type blockHasher struct {
	size, max, n, start int
	h, prev             uint64
	carry               [8]byte
	nc                  int
	out                 []uint64
}

func (b *blockHasher) reset() {
	b.h, b.n, b.nc = hashOffset, 0, 0
	b.mix(b.prev) // the previous block's hash opens this one
}

func (b *blockHasher) mix(w uint64) {
	h := (b.h ^ w) * hashMul
	b.h = h ^ h>>32
}

func (b *blockHasher) full() bool { return len(b.out)-b.start >= b.max }

func (b *blockHasher) write(p []byte) {
	for len(p) > 0 && !b.full() {
		k := min(len(p), b.size-b.n)
		b.feed(p[:k])
		b.n += k
		p = p[k:]
		if b.n == b.size {
			b.emit()
		}
	}
}

// feed mixes q into the block, eight bytes at a time.
func (b *blockHasher) feed(q []byte) {
	if b.nc > 0 {
		c := copy(b.carry[b.nc:], q)
		b.nc += c
		q = q[c:]
		if b.nc < 8 {
			return
		}
		b.mix(binary.LittleEndian.Uint64(b.carry[:]))
		b.nc = 0
	}
	for len(q) >= 8 {
		b.mix(binary.LittleEndian.Uint64(q))
		q = q[8:]
	}
	b.nc = copy(b.carry[:], q)
}

func (b *blockHasher) emit() {
	if b.nc > 0 { // the block's last bytes, and how many
		var w [8]byte
		copy(w[:], b.carry[:b.nc])
		b.mix(binary.LittleEndian.Uint64(w[:]) ^ uint64(b.nc)<<59)
	}
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
