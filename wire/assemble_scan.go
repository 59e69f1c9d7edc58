package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// This file walks JSON that encoding/json has already found valid
// (json.Valid): it finds the bounds of values and the members of objects
// and arrays in place, without decoding them, for the Assembler.

// rawScan is a position in valid JSON.
type rawScan struct {
	b []byte
	i int
}

func (s *rawScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value moves past one value and returns its bytes.
func (s *rawScan) value() []byte {
	s.ws()
	start := s.i
	if s.i >= len(s.b) {
		return nil
	}
	switch s.b[s.i] {
	case '"':
		s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				s.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return s.b[start:s.i]
				}
			}
			s.i++
		}
	default: // a number or a literal
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.b[start:s.i]
			}
			s.i++
		}
	}
	return s.b[start:s.i]
}

func (s *rawScan) skipString() {
	s.i++ // the opening quote
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return
		}
		s.i++
	}
}

// members calls fn with each member of the object v (keys with their
// quotes), in order. It reports false if v is not an object.
func members(v []byte, fn func(key, val []byte)) bool {
	it := items(v, '{', '}')
	for it.next() {
		k := it.s.value()
		it.s.ws()
		it.s.i++ // ':'
		fn(k, it.s.value())
	}
	return it.ok
}

// elements calls fn with each element of the array v, in order. It
// reports false if v is not an array.
func elements(v []byte, fn func(val []byte)) bool {
	it := items(v, '[', ']')
	for it.next() {
		fn(it.s.value())
	}
	return it.ok
}

// itemWalk walks the items of an object or an array, the one walk members
// and elements share. It is a value its caller loops over, not a function
// that calls back with a pointer to its scan: such a pointer, passed to a
// function value, made every walk allocate its scan (several per chunk of
// a reassembled stream).
type itemWalk struct {
	s        rawScan
	end      byte
	ok, done bool // ok: v was whole (opened by open, closed by end)
}

// items starts a walk of the object or array v, opened by open and closed
// by end.
func items(v []byte, open, end byte) itemWalk {
	it := itemWalk{s: rawScan{b: v}, end: end}
	it.s.ws()
	if it.s.i >= len(it.s.b) || it.s.b[it.s.i] != open {
		it.done = true
		return it
	}
	it.s.i++
	return it
}

// next moves to the start of the next item, reporting false at the end
// (ok then says whether v ended with end).
func (it *itemWalk) next() bool {
	if it.done {
		return false
	}
	s := &it.s
	s.ws()
	if s.i >= len(s.b) {
		it.done = true
		return false
	}
	switch s.b[s.i] {
	case it.end:
		it.done, it.ok = true, true
		return false
	case ',':
		s.i++
		s.ws()
	}
	return true
}

// keyIs reports whether the raw key (with its quotes) names name.
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return len(key) == len(name)+2 && string(key[1:len(key)-1]) == name
	}
	var k string
	return json.Unmarshal(key, &k) == nil && k == name
}

// isNull reports whether the raw value is null.
func isNull(v []byte) bool { return string(v) == "null" }

// interior is a string's bytes between its quotes, or an array's between
// its brackets (without the white space around them).
func interior(v []byte, array bool) []byte {
	in := v[1 : len(v)-1]
	if array {
		in = bytes.TrimSpace(in)
	}
	return in
}

// rawIndex reads an "index" value: a whole number, or ok false.
func rawIndex(v []byte) (int, bool) {
	n, err := strconv.Atoi(string(v))
	return n, err == nil && n >= 0
}
