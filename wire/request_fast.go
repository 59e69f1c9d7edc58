package wire

import "unicode/utf8"

// parseOpenAIFast reads an OpenAI request body's fields as decodeBody does
// into an openAIRequest, in one pass of the scanner that Inspect's fast path
// uses and without encoding/json's reflection: the body is usually a long
// prompt around a few small fields. Like inspectFast it answers only when
// its answer is certainly encoding/json's: ok is false on malformed JSON, on
// a body that is not an object, on a type error in one of the fields, on a
// member name with an escape or a non-ASCII byte (which encoding/json may
// fold onto a field name), on a model string with an escape or invalid
// UTF-8, and on nesting deeper than the scanner follows; decodeBody then
// decides, with its errors. The semantics it reproduces: member names match
// field names in any ASCII letter case; a repeated member's last value
// wins, null leaves a string or bool as it was and resets a pointer, and a
// repeated stream_options object merges into the previous one; the whole
// numbers read through wholeNumber as encoding/json calls it (null too).
func parseOpenAIFast(body []byte) (f openAIRequest, ok bool) {
	s := chunkScan{data: body}
	s.skipSpace()
	if s.next() != '{' {
		return f, false
	}
	whole := func(n *wholeNumber) bool {
		raw, ok := s.rawValue()
		return ok && n.UnmarshalJSON(raw) == nil
	}
	ok = s.object(func(name []byte) bool {
		switch {
		case is(name, "model"):
			switch s.next() {
			case 'n':
				return s.literal("null")
			case '"':
				start := s.pos
				escaped, ok := s.skipString()
				if !ok || escaped {
					return false
				}
				raw := s.data[start+1 : s.pos-1]
				if !utf8.Valid(raw) {
					return false
				}
				f.Model = string(raw)
				return true
			}
			return false
		case is(name, "stream"):
			switch s.next() {
			case 'n':
				return s.literal("null")
			case 't':
				f.Stream = true
				return s.literal("true")
			case 'f':
				f.Stream = false
				return s.literal("false")
			}
			return false
		case is(name, "stream_options"):
			switch s.next() {
			case 'n':
				f.StreamOptions = nil
				return s.literal("null")
			case '{':
				if f.StreamOptions == nil {
					f.StreamOptions = &StreamOptions{}
				}
				return s.streamOptions(f.StreamOptions)
			}
			return false
		case is(name, "max_tokens"):
			return whole(&f.MaxTokens)
		case is(name, "max_completion_tokens"):
			return whole(&f.MaxCompletionTokens)
		case is(name, "n"):
			return whole(&f.N)
		}
		return s.skipValue()
	})
	if !ok {
		return openAIRequest{}, false
	}
	s.skipSpace()
	return f, s.pos == len(body)
}

// streamOptions reads a stream_options object into o.
func (s *chunkScan) streamOptions(o *StreamOptions) bool {
	return s.object(func(name []byte) bool {
		if !is(name, "include_usage") {
			return s.skipValue()
		}
		switch s.next() {
		case 'n':
			return s.literal("null")
		case 't':
			o.IncludeUsage = true
			return s.literal("true")
		case 'f':
			o.IncludeUsage = false
			return s.literal("false")
		}
		return false
	})
}
