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

// chunkFacts is what a scan collects; Inspect turns it into a ChunkInfo.
type chunkFacts struct {
	output, finished bool
	errorObject      bool // "object":"error"
	errorField       bool // "error" present and not null
	choicesSeen      bool
	choicesNonEmpty  bool
	usagePresent     bool
	usage            Usage
	details          []byte // usage.prompt_tokens_details, raw (nil: absent)
	timings          []byte // llama.cpp's timings, raw (nil: absent)
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

// top scans the top-level object.
func (s *chunkScan) top(f *chunkFacts) bool {
	return s.object(func(name []byte) (ok bool) {
		switch {
		case is(name, "object"):
			ok = s.objectField(f)
		case is(name, "choices"):
			ok = s.choices(f)
		case is(name, "usage"):
			ok = s.usage(f)
		case is(name, "timings"):
			f.timings, ok = s.rawValue()
		case is(name, "error"):
			var raw []byte
			raw, ok = s.rawValue()
			f.errorField = string(raw) != "null"
		default:
			ok = s.skipValue()
		}
		return ok
	})
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
	return s.array(func() bool {
		f.choicesNonEmpty = true
		switch s.next() {
		case 'n':
			return s.literal("null") // a null element stays zero
		case '{':
			var c choiceFacts
			if !s.choice(&c) {
				return false
			}
			if c.text || c.content || c.reasoningContent || c.reasoning || c.toolCalls {
				f.output = true
			}
			f.finished = f.finished || c.finish
			return true
		}
		return false
	})
}

// choice reads one element of "choices".
func (s *chunkScan) choice(c *choiceFacts) bool {
	return s.object(func(name []byte) (ok bool) {
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
		return ok
	})
}

// delta reads a choice's "delta" object into c.
func (s *chunkScan) delta(c *choiceFacts) bool {
	return s.object(func(name []byte) (ok bool) {
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
		return ok
	})
}

// usage reads "usage": an object (merged into an earlier one unless a null
// came between), or null.
func (s *chunkScan) usage(f *chunkFacts) bool {
	switch s.next() {
	case 'n':
		f.usagePresent = false
		f.usage, f.details = Usage{}, nil
		return s.literal("null")
	case '{':
	default:
		return false
	}
	if !f.usagePresent {
		f.usagePresent = true
		f.usage, f.details = Usage{}, nil
	}
	return s.object(func(name []byte) (ok bool) {
		switch {
		case is(name, "prompt_tokens"):
			ok = s.intField(&f.usage.PromptTokens)
		case is(name, "completion_tokens"):
			ok = s.intField(&f.usage.CompletionTokens)
		case is(name, "total_tokens"):
			ok = s.intField(&f.usage.TotalTokens)
		case is(name, "prompt_tokens_details"):
			f.details, ok = s.rawValue()
		default:
			ok = s.skipValue()
		}
		return ok
	})
}
