package wire

import "encoding/binary"

// This file is the JSON scanner under Inspect's fast path: it validates
// syntax exactly as encoding/json's checkValid does (same whitespace, number
// grammar, string escapes and control-byte rule; no UTF-8 check), reading
// in place and allocating nothing. It reports failure, never an error: the
// caller then asks encoding/json, which gives the error.

// maxFastDepth bounds the nesting the fast path follows; deeper input goes to
// encoding/json, which has its own limit (10000) and error for it.
const maxFastDepth = 200

// chunkScan is the state of one scan: the payload and the read position.
type chunkScan struct {
	data  []byte
	pos   int
	depth int
}

// skipSpace skips JSON whitespace. Compact JSON has none, so the common
// case is one comparison, inlined.
func (s *chunkScan) skipSpace() {
	if s.pos < len(s.data) && s.data[s.pos] > ' ' {
		return
	}
	s.skipSpaceSlow()
}

func (s *chunkScan) skipSpaceSlow() {
	data, i := s.data, s.pos
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	s.pos = i
}

// next returns the byte at the read position, or 0 at the end.
func (s *chunkScan) next() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// enter and leave count nesting; enter reports false past maxFastDepth.
func (s *chunkScan) enter() bool {
	s.depth++
	return s.depth <= maxFastDepth
}

func (s *chunkScan) leave() { s.depth-- }

// key reads a member name and the colon after it, leaving the position at
// the value. It returns the name's raw bytes; ok is false on bad syntax and
// on a name with an escape or a non-ASCII byte, which encoding/json may fold
// onto one of our field names.
func (s *chunkScan) key() (name []byte, ok bool) {
	if s.next() != '"' {
		return nil, false
	}
	data := s.data
	start := s.pos + 1
	i := start
	for i < len(data) && keyPlain[data[i]] {
		i++
	}
	if i >= len(data) || data[i] != '"' {
		return nil, false
	}
	name = data[start:i]
	if i+1 < len(data) && data[i+1] == ':' {
		s.pos = i + 2
	} else {
		s.pos = i + 1
		s.skipSpace()
		if s.next() != ':' {
			return nil, false
		}
		s.pos++
	}
	s.skipSpace()
	return name, true
}

// afterMember consumes the separator after a member's value: it reports
// more=true after a comma (position at the next key), more=false after the
// closing brace.
func (s *chunkScan) afterMember() (more, ok bool) {
	s.skipSpace()
	switch s.next() {
	case ',':
		s.pos++
		s.skipSpace()
		return true, true
	case '}':
		s.pos++
		return false, true
	}
	return false, false
}

// object walks the object at the position: for each member it reads the
// name and calls member, which must consume the value. It reports false on
// bad syntax or when member does. member does not escape, so the closures
// the readers pass stay on the stack.
func (s *chunkScan) object(member func(name []byte) bool) bool {
	members, ok := s.openObject()
	if !ok || !members {
		return ok
	}
	for {
		name, ok := s.key()
		if !ok || !member(name) {
			return false
		}
		more, ok := s.afterMember()
		if !ok {
			return false
		}
		if !more {
			s.leave()
			return true
		}
	}
}

// openObject consumes '{' and reports whether the object has members.
func (s *chunkScan) openObject() (members, ok bool) {
	if !s.enter() {
		return false, false
	}
	s.pos++ // '{'
	s.skipSpace()
	if s.next() == '}' {
		s.pos++
		s.leave()
		return false, true
	}
	return true, true
}

// is reports whether a member name matches field (lower-case ASCII letters
// and '_') as encoding/json matches it: exactly or with ASCII case folded.
func is(name []byte, field string) bool {
	return len(name) == len(field) && (string(name) == field || foldsTo(name, field))
}

func foldsTo(name []byte, field string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != field[i] {
			return false
		}
	}
	return true
}

// intField reads an int field: an integer literal of at most 18 digits sets
// it, null leaves it. Anything else gives up: a fraction or exponent is a
// type error, and 19 digits or more may overflow.
func (s *chunkScan) intField(v *int) bool {
	if s.next() == 'n' {
		return s.literal("null")
	}
	neg := false
	if s.next() == '-' {
		neg = true
		s.pos++
	}
	start := s.pos
	if s.next() == '0' {
		s.pos++
	} else {
		s.digits()
	}
	digits := s.data[start:s.pos]
	if len(digits) == 0 || len(digits) > 18 {
		return false
	}
	if c := s.next(); c == '.' || c == 'e' || c == 'E' || ('0' <= c && c <= '9') {
		return false
	}
	n := 0
	for _, c := range digits {
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	*v = n
	return true
}

// literal consumes the literal lit (true, false or null).
func (s *chunkScan) literal(lit string) bool {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return false
	}
	s.pos += len(lit)
	return true
}

// rawValue skips one value and returns its bytes.
func (s *chunkScan) rawValue() ([]byte, bool) {
	start := s.pos
	if !s.skipValue() {
		return nil, false
	}
	return s.data[start:s.pos], true
}

// skipValue validates and skips one JSON value starting at the position.
func (s *chunkScan) skipValue() bool {
	switch c := s.next(); {
	case c == '"':
		_, ok := s.skipString()
		return ok
	case c == '{':
		return s.skipObject()
	case c == '[':
		return s.skipArray()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || ('0' <= c && c <= '9'):
		return s.skipNumber()
	}
	return false
}

func (s *chunkScan) skipObject() bool {
	members, ok := s.openObject()
	if !ok || !members {
		return ok
	}
	for {
		if s.next() != '"' {
			return false
		}
		if _, ok := s.skipString(); !ok {
			return false
		}
		s.skipSpace()
		if s.next() != ':' {
			return false
		}
		s.pos++
		s.skipSpace()
		if !s.skipValue() {
			return false
		}
		more, ok := s.afterMember()
		if !ok {
			return false
		}
		if !more {
			s.leave()
			return true
		}
	}
}

func (s *chunkScan) skipArray() bool { return s.array(s.skipValue) }

// array walks the array at the position ('['): for each element it calls
// elem, which must consume it. It reports false on bad syntax or when elem
// does. Like object's member, elem does not escape.
func (s *chunkScan) array(elem func() bool) bool {
	if !s.enter() {
		return false
	}
	s.pos++
	s.skipSpace()
	if s.next() == ']' {
		s.pos++
		s.leave()
		return true
	}
	for {
		if !elem() {
			return false
		}
		s.skipSpace()
		switch s.next() {
		case ',':
			s.pos++
			s.skipSpace()
		case ']':
			s.pos++
			s.leave()
			return true
		default:
			return false
		}
	}
}

// keyPlain marks the bytes the fast path takes in a member name: printable
// ASCII but the quote and the backslash.
var keyPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// stringPlain marks the bytes that need no attention inside a string.
var stringPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const (
	lsbs = 0x0101010101010101
	msbs = 0x8080808080808080
)

// plainWord reports whether the 8 bytes in x (read from a string's body)
// are all plain as stringPlain has it: no quote, backslash or control byte.
// (b-lsbs)&^b sets a byte's high bit if that byte of b is 0 (b = x^c finds
// c) or below 0x20 (b = x), or if a borrow came from a lower byte that was;
// so the word-wide answer is exact (TestPlainWord checks it).
func plainWord(x uint64) bool {
	q := x ^ (lsbs * '"')
	b := x ^ (lsbs * '\\')
	return ((q-lsbs)&^q|(b-lsbs)&^b|(x-lsbs*0x20)&^x)&msbs == 0
}

// skipString validates and skips the string at the position (which is '"'),
// reporting whether it held an escape. Like encoding/json's syntax check it
// rejects control bytes and bad escapes and lets any other byte through.
func (s *chunkScan) skipString() (escaped, ok bool) {
	data, i := s.data, s.pos+1
	for {
		for i+8 <= len(data) && plainWord(binary.LittleEndian.Uint64(data[i:])) {
			i += 8
		}
		for i < len(data) && stringPlain[data[i]] {
			i++
		}
		if i >= len(data) {
			return false, false
		}
		switch data[i] {
		case '"':
			s.pos = i + 1
			return escaped, true
		case '\\':
			escaped = true
			if i+1 >= len(data) {
				return false, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(data) {
					return false, false
				}
				for _, h := range data[i+2 : i+6] {
					if !isHex(h) {
						return false, false
					}
				}
				i += 6
			default:
				return false, false
			}
		default: // a control byte
			return false, false
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipNumber validates and skips a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *chunkScan) skipNumber() bool {
	if s.next() == '-' {
		s.pos++
	}
	switch c := s.next(); {
	case c == '0':
		s.pos++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.next() == '.' {
		s.pos++
		if !s.digits() {
			return false
		}
	}
	if c := s.next(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.next(); c == '+' || c == '-' {
			s.pos++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits skips [0-9]* and reports whether there was at least one.
func (s *chunkScan) digits() bool {
	data, i := s.data, s.pos
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	ok := i > s.pos
	s.pos = i
	return ok
}
