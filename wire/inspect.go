package wire

// This file is Inspect's fast path: a single-pass scanner that validates the
// whole payload as JSON and reads the few fields Inspect needs, without
// allocating. It answers only when its answer is certainly the one
// encoding/json gives (inspectSlow, the decoder it replaces); on anything
// else -- malformed JSON, a type mismatch, or pathological input such as an
// escaped or non-ASCII key where one of ours is expected, a repeated
// "choices", deep nesting or a huge usage number -- it gives up and Inspect
// asks encoding/json, so errors and edge cases stay exactly as they were.
//
// The encoding/json semantics it reproduces (v1, the default build):
//   - keys match field names case-insensitively (ASCII here; others give up);
//   - a repeated key: the last value wins, except that null leaves a string
//     unchanged, and a repeated object ("delta", "usage") merges into the
//     previous one field by field unless a null reset a pointer in between;
//   - null: no-op for a string or struct, nil for a pointer, slice or
//     json.RawMessage (which keeps the bytes "null");
//   - usage numbers must parse as int64 (no fraction, no exponent).

// maxFastDepth bounds the nesting the fast path follows; deeper input goes to
// encoding/json, which has its own limit (10000) and error for it.
const maxFastDepth = 200

// chunkScan is the state of one scan: the payload and the read position.
type chunkScan struct {
	data  []byte
	pos   int
	depth int
}

// chunkFacts is what a scan collects; Inspect turns it into a ChunkInfo.
type chunkFacts struct {
	output, finished bool
	errorObject      bool // "object":"error"
	errorField       bool // "error" present and not null
	choicesSeen      bool
	choicesNonEmpty  bool
	usagePresent     bool
	usage            Usage
}

// choiceFacts is what one element of "choices" says. Its fields persist
// across repeated "delta" keys, as encoding/json merges them.
type choiceFacts struct {
	text, content, reasoningContent, reasoning, toolCalls, finish bool
}

// inspectFast scans data. ok is false when the fast path cannot vouch for
// the answer and encoding/json must decide.
func inspectFast(data []byte) (f chunkFacts, ok bool) {
	s := chunkScan{data: data}
	s.skipSpace()
	if s.pos >= len(data) {
		return f, false
	}
	switch data[s.pos] {
	case '{':
		ok = s.top(&f)
	case 'n':
		// A top-level null decodes into nothing and is not an error.
		ok = s.literal("null")
	default:
		return f, false // a scalar or array: a type error, or not JSON
	}
	if !ok {
		return f, false
	}
	s.skipSpace()
	return f, s.pos == len(data)
}

func (s *chunkScan) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
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
	start := s.pos + 1
	i := start
	for ; i < len(s.data); i++ {
		c := s.data[i]
		if c == '"' {
			break
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, false
		}
	}
	if i >= len(s.data) {
		return nil, false
	}
	name = s.data[start:i]
	s.pos = i + 1
	s.skipSpace()
	if s.next() != ':' {
		return nil, false
	}
	s.pos++
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
	if len(name) != len(field) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == field[i] {
			continue
		}
		if 'A' <= c && c <= 'Z' && c+('a'-'A') == field[i] {
			continue
		}
		return false
	}
	return true
}

// top scans the top-level object.
func (s *chunkScan) top(f *chunkFacts) bool {
	members, ok := s.openObject()
	if !ok || !members {
		return ok
	}
	for {
		name, ok := s.key()
		if !ok {
			return false
		}
		switch {
		case is(name, "object"):
			ok = s.objectField(f)
		case is(name, "choices"):
			ok = s.choices(f)
		case is(name, "usage"):
			ok = s.usage(f)
		case is(name, "error"):
			var raw []byte
			raw, ok = s.rawValue()
			f.errorField = string(raw) != "null"
		default:
			ok = s.skipValue()
		}
		if !ok {
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

// objectField reads "object": a string (the last one wins), or null (no-op).
func (s *chunkScan) objectField(f *chunkFacts) bool {
	switch s.next() {
	case 'n':
		return s.literal("null")
	case '"':
		start := s.pos
		escaped, ok := s.skipString()
		if !ok || escaped {
			return false // an escape may spell "error"; let the decoder unquote
		}
		f.errorObject = string(s.data[start:s.pos]) == `"error"`
		return true
	}
	return false
}

// stringField reads a string field into set (whether it is non-empty): a
// string sets it, null leaves it; anything else is a type error.
func (s *chunkScan) stringField(set *bool) bool {
	switch s.next() {
	case 'n':
		return s.literal("null")
	case '"':
		start := s.pos
		if _, ok := s.skipString(); !ok {
			return false
		}
		// Every escape decodes to at least one byte and invalid UTF-8 to
		// U+FFFD, so the decoded string is empty only if the raw one is "".
		*set = s.pos-start > 2
		return true
	}
	return false
}

// choices reads "choices": an array of choice objects (or nulls), or null.
func (s *chunkScan) choices(f *chunkFacts) bool {
	if f.choicesSeen {
		// A repeated "choices" decodes into the old slice's elements, merging
		// with what they held; leave that to the decoder.
		return false
	}
	f.choicesSeen = true
	switch s.next() {
	case 'n':
		return s.literal("null")
	case '[':
	default:
		return false
	}
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
		f.choicesNonEmpty = true
		switch s.next() {
		case 'n':
			if !s.literal("null") { // a null element stays zero
				return false
			}
		case '{':
			var c choiceFacts
			if !s.choice(&c) {
				return false
			}
			if c.text || c.content || c.reasoningContent || c.reasoning || c.toolCalls {
				f.output = true
			}
			f.finished = f.finished || c.finish
		default:
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

// choice reads one element of "choices".
func (s *chunkScan) choice(c *choiceFacts) bool {
	members, ok := s.openObject()
	if !ok || !members {
		return ok
	}
	for {
		name, ok := s.key()
		if !ok {
			return false
		}
		switch {
		case is(name, "text"):
			ok = s.stringField(&c.text)
		case is(name, "delta"):
			switch s.next() {
			case 'n':
				ok = s.literal("null")
			case '{':
				ok = s.delta(c)
			default:
				ok = false
			}
		case is(name, "finish_reason"):
			switch s.next() {
			case 'n':
				ok = s.literal("null")
				c.finish = false // a *string set to nil
			case '"':
				start := s.pos
				_, ok = s.skipString()
				c.finish = s.pos-start > 2
			default:
				ok = false
			}
		default:
			ok = s.skipValue()
		}
		if !ok {
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

// delta reads a choice's "delta" object into c.
func (s *chunkScan) delta(c *choiceFacts) bool {
	members, ok := s.openObject()
	if !ok || !members {
		return ok
	}
	for {
		name, ok := s.key()
		if !ok {
			return false
		}
		switch {
		case is(name, "content"):
			ok = s.stringField(&c.content)
		case is(name, "reasoning_content"):
			ok = s.stringField(&c.reasoningContent)
		case is(name, "reasoning"):
			ok = s.stringField(&c.reasoning)
		case is(name, "tool_calls"):
			var raw []byte
			raw, ok = s.rawValue()
			c.toolCalls = string(raw) != "null" && string(raw) != "[]"
		default:
			ok = s.skipValue()
		}
		if !ok {
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

// usage reads "usage": an object (merged into an earlier one unless a null
// came between), or null.
func (s *chunkScan) usage(f *chunkFacts) bool {
	switch s.next() {
	case 'n':
		f.usagePresent = false
		f.usage = Usage{}
		return s.literal("null")
	case '{':
	default:
		return false
	}
	if !f.usagePresent {
		f.usagePresent = true
		f.usage = Usage{}
	}
	members, ok := s.openObject()
	if !ok || !members {
		return ok
	}
	for {
		name, ok := s.key()
		if !ok {
			return false
		}
		switch {
		case is(name, "prompt_tokens"):
			ok = s.intField(&f.usage.PromptTokens)
		case is(name, "completion_tokens"):
			ok = s.intField(&f.usage.CompletionTokens)
		case is(name, "total_tokens"):
			ok = s.intField(&f.usage.TotalTokens)
		default:
			ok = s.skipValue()
		}
		if !ok {
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
		for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
			s.pos++
		}
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

func (s *chunkScan) skipArray() bool {
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
		if !s.skipValue() {
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

// stringPlain marks the bytes that need no attention inside a string.
var stringPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// skipString validates and skips the string at the position (which is '"'),
// reporting whether it held an escape. Like encoding/json's syntax check it
// rejects control bytes and bad escapes and lets any other byte through.
func (s *chunkScan) skipString() (escaped, ok bool) {
	i := s.pos + 1
	for {
		for i < len(s.data) && stringPlain[s.data[i]] {
			i++
		}
		if i >= len(s.data) {
			return false, false
		}
		switch s.data[i] {
		case '"':
			s.pos = i + 1
			return escaped, true
		case '\\':
			escaped = true
			if i+1 >= len(s.data) {
				return false, false
			}
			switch s.data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s.data) {
					return false, false
				}
				for _, h := range s.data[i+2 : i+6] {
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
	start := s.pos
	for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos > start
}
