package wire

// PromptSize is what a generation request's body says of the size of its
// prompt before the engine tokenizes it: the characters of text it gives and
// the token IDs it gives as integers. A gateway turns it into an estimate of
// prompt tokens by a ratio it calibrates against the engines' usage reports
// (proxy's estimator); the engine's own count is known only once it answers.
type PromptSize struct {
	// Chars is the length in bytes of the text the prompt's fields hold:
	// every string value under them (message contents, content parts' text,
	// tool definitions, a completion prompt, ...), an escape counted as one
	// byte. Images, audio and files are not text and are not counted.
	Chars int
	// Tokens is the number of token IDs given as integers (a prompt of
	// token IDs, SGLang's input_ids): exact.
	Tokens int
	// Whole is true when the body could not be walked field by field (a
	// member name with an escape or a non-ASCII byte, nesting past the
	// bound): Chars is then the length of the whole body, an upper bound
	// that no client can shrink by an odd key.
	Whole bool
}

// maxPromptDepth bounds the nesting MeasurePrompt follows.
const maxPromptDepth = 64

// MeasurePrompt measures the prompt of a request body of shape s in one
// pass, allocating nothing; it reads only the fields that hold the prompt
// (see promptField) and skips the rest. It never fails: a body it cannot
// walk (not JSON, odd member names, deep nesting) is measured whole (see
// PromptSize.Whole), so the measure is bounded by the body's length and
// costs time linear in it.
func MeasurePrompt(s Shape, body []byte) PromptSize {
	var m PromptSize
	sc := &chunkScan{data: body}
	sc.skipSpace()
	ok := sc.next() == '{' && sc.object(func(name []byte) bool {
		if promptField(s, name) {
			return sc.measure(&m, 0)
		}
		return sc.skipValue()
	})
	if !ok {
		return PromptSize{Chars: len(body), Whole: true}
	}
	return m
}

// promptField reports whether a top-level member of a request of shape s
// holds prompt text or tokens.
func promptField(s Shape, name []byte) bool {
	switch s {
	case ShapeOpenAI:
		// chat: messages and the tools rendered into the prompt;
		// completions: prompt (and suffix).
		return is(name, "messages") || is(name, "prompt") || is(name, "tools") || is(name, "suffix")
	case ShapeResponses:
		return is(name, "input") || is(name, "instructions") || is(name, "tools")
	case ShapeLlamaCpp:
		return is(name, "prompt") || is(name, "messages") || is(name, "input_prefix") ||
			is(name, "input_suffix") || is(name, "input_extra")
	case ShapeSGLang:
		return is(name, "text") || is(name, "input_ids")
	}
	return false
}

// notText reports whether a member holds media rather than text (an image
// URL, often a data URL of megabytes, is a few hundred tokens, not one per
// byte): it is skipped.
func notText(name []byte) bool {
	return is(name, "image_url") || is(name, "image") || is(name, "input_image") ||
		is(name, "input_audio") || is(name, "audio") || is(name, "file") ||
		is(name, "video_url") || is(name, "video")
}

// measure adds the value at the position to m: a string's length to Chars,
// an integer to Tokens (an array of them is a prompt of token IDs), and
// arrays and objects element by element.
func (s *chunkScan) measure(m *PromptSize, depth int) bool {
	if depth > maxPromptDepth {
		return false
	}
	switch c := s.next(); {
	case c == '"':
		start := s.pos
		escaped, ok := s.skipString()
		if !ok {
			return false
		}
		n := s.pos - start - 2
		if escaped {
			n = unescapedLen(s.data[start+1 : s.pos-1])
		}
		m.Chars += n
		return true
	case c == '[':
		return s.array(func() bool { return s.measure(m, depth+1) })
	case c == '{':
		return s.object(func(name []byte) bool {
			if notText(name) {
				return s.skipValue()
			}
			return s.measure(m, depth+1)
		})
	case c == '-' || ('0' <= c && c <= '9'):
		m.Tokens++
		return s.skipNumber()
	}
	return s.skipValue() // true, false, null
}

// unescapedLen is the length of a valid string body with each escape
// counted as one byte (a \uXXXX as one too: a character, whatever its
// UTF-8 length).
func unescapedLen(b []byte) int {
	n := 0
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+1 < len(b) {
			if b[i+1] == 'u' {
				i += 5
			} else {
				i++
			}
		}
		n++
	}
	return n
}
