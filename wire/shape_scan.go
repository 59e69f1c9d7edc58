package wire

import "bytes"

// This file is InspectAs's fast path for the non-OpenAI shapes, on the
// scanner of jsonscan.go. As for Inspect, it answers only where its answer is
// certainly that of the shape's encoding/json reader in shape.go; anything
// else goes to that reader. To keep the encoding/json semantics it must
// reproduce small, it gives up on any field it reads appearing twice (also
// as a case-folded spelling: encoding/json would merge or overwrite), on
// escaped strings whose value it compares, and on every type mismatch.
// What remains of encoding/json's rules, for a single occurrence:
//   - keys match field names case-insensitively (ASCII; others give up);
//   - null leaves a string or bool unset, makes a pointer nil and a
//     json.RawMessage "null";
//   - integers have no fraction or exponent and fit in int64.

// fieldSet records which of a reader's fields were seen, to give up on a
// repeated one.
type fieldSet uint32

// once marks bit seen and reports whether it was not seen before.
func (f *fieldSet) once(bit fieldSet) bool {
	if *f&bit != 0 {
		return false
	}
	*f |= bit
	return true
}

// payload scans a whole payload: an object read by obj, or null (which
// encoding/json decodes into nothing, without error).
func (s *chunkScan) payload(obj func() bool) bool {
	s.skipSpace()
	switch s.next() {
	case '{':
		if !obj() {
			return false
		}
	case 'n':
		if !s.literal("null") {
			return false
		}
	default:
		return false // a scalar or array: a type error, or not JSON
	}
	s.skipSpace()
	return s.pos == len(s.data)
}

// boolField reads a bool: true or false sets it, null leaves it.
func (s *chunkScan) boolField(v *bool) bool {
	switch s.next() {
	case 't':
		*v = true
		return s.literal("true")
	case 'f':
		*v = false
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return false
}

// intPtrField reads a *int: null makes it nil (present false), an integer
// sets it.
func (s *chunkScan) intPtrField(present *bool, v *int) bool {
	if s.next() == 'n' {
		*present = false
		return s.literal("null")
	}
	*present = true
	return s.intField(v)
}

// plainString reads a string field whose value is compared: it returns the
// bytes between the quotes, nil for null. It gives up on an escape, which
// the decoder must unquote.
func (s *chunkScan) plainString() (value []byte, ok bool) {
	switch s.next() {
	case 'n':
		return nil, s.literal("null")
	case '"':
		start := s.pos
		escaped, ok := s.skipString()
		if !ok || escaped {
			return nil, false
		}
		return s.data[start+1 : s.pos-1], true
	}
	return nil, false
}

// errorFields are the "object" and "error" fields that mark an error
// payload on every shape.
type errorFields struct{ object, field bool }

// read reads "object" or "error" (name is one of them) into e; seen guards
// against repeats with the two bits given.
func (e *errorFields) read(s *chunkScan, name []byte, seen *fieldSet, objectBit, errorBit fieldSet) (handled, ok bool) {
	switch {
	case is(name, "object"):
		if !seen.once(objectBit) {
			return true, false
		}
		v, ok := s.plainString()
		e.object = string(v) == "error"
		return true, ok
	case is(name, "error"):
		if !seen.once(errorBit) {
			return true, false
		}
		raw, ok := s.rawValue()
		e.field = string(raw) != "null"
		return true, ok
	}
	return false, false
}

func (e errorFields) failed() bool { return e.object || e.field }

// inspectLlamaCppFast scans a llama.cpp native completion event.
func inspectLlamaCppFast(data []byte) (f shapeFacts, ok bool) {
	s := chunkScan{data: data}
	var seen fieldSet
	var errs errorFields
	var predicted, evaluated bool
	var u Usage
	ok = s.payload(func() bool {
		return s.object(func(name []byte) bool {
			switch {
			case is(name, "content"):
				return seen.once(1) && s.stringField(&f.output)
			case is(name, "stop"):
				return seen.once(2) && s.boolField(&f.finished)
			case is(name, "tokens_predicted"):
				return seen.once(4) && s.intPtrField(&predicted, &u.CompletionTokens)
			case is(name, "tokens_evaluated"):
				return seen.once(8) && s.intPtrField(&evaluated, &u.PromptTokens)
			}
			if handled, ok := errs.read(&s, name, &seen, 16, 32); handled {
				return ok
			}
			return s.skipValue()
		})
	})
	if !ok {
		return f, false
	}
	f.failed = errs.failed()
	if predicted || evaluated {
		if !predicted {
			u.CompletionTokens = 0
		}
		if !evaluated {
			u.PromptTokens = 0
		}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		f.usagePresent, f.usage = true, u
	}
	return f, true
}

// inspectSGLangFast scans an SGLang /generate event.
func inspectSGLangFast(data []byte) (f shapeFacts, ok bool) {
	s := chunkScan{data: data}
	var seen fieldSet
	var errs errorFields
	var m sglangMetaFacts
	ok = s.payload(func() bool {
		return s.object(func(name []byte) bool {
			switch {
			case is(name, "text"):
				return seen.once(1) && s.stringField(&f.output)
			case is(name, "meta_info"):
				return seen.once(2) && s.sglangMeta(&m)
			}
			if handled, ok := errs.read(&s, name, &seen, 4, 8); handled {
				return ok
			}
			return s.skipValue()
		})
	})
	if !ok {
		return f, false
	}
	f.failed = errs.failed()
	if m.present {
		if m.completion && m.usage.CompletionTokens > 0 {
			f.output = true
		}
		if m.prompt || m.completion {
			u := m.usage
			if !m.prompt {
				u.PromptTokens = 0
			}
			if !m.completion {
				u.CompletionTokens = 0
			}
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
			f.usagePresent, f.usage = true, u
		}
		f.finished = m.finished
		f.failed = f.failed || m.abort
	}
	return f, true
}

// sglangMetaFacts is what an SGLang event's meta_info says.
type sglangMetaFacts struct {
	present            bool // an object, not null
	prompt, completion bool // the counts are present
	usage              Usage
	finished, abort    bool
}

// sglangMeta reads "meta_info": an object, or null.
func (s *chunkScan) sglangMeta(m *sglangMetaFacts) bool {
	var seen fieldSet
	return s.nullableObject(&m.present, func(name []byte) bool {
		switch {
		case is(name, "finish_reason"):
			return seen.once(1) && s.finishReason(m)
		case is(name, "prompt_tokens"):
			return seen.once(2) && s.intPtrField(&m.prompt, &m.usage.PromptTokens)
		case is(name, "completion_tokens"):
			return seen.once(4) && s.intPtrField(&m.completion, &m.usage.CompletionTokens)
		}
		return s.skipValue()
	})
}

// finishReason reads meta_info.finish_reason: null, or an object whose
// "type" may be "abort", or (in servers that send one) any other value.
func (s *chunkScan) finishReason(m *sglangMetaFacts) bool {
	switch s.next() {
	case 'n':
		return s.literal("null")
	case '{':
	default:
		m.finished = true
		return s.skipValue()
	}
	m.finished = true
	var seen fieldSet
	return s.object(func(name []byte) bool {
		if is(name, "type") {
			if !seen.once(1) {
				return false
			}
			v, ok := s.plainString()
			m.abort = string(v) == "abort"
			return ok
		}
		return s.skipValue()
	})
}

// inspectResponsesFast scans a Responses API event (or a whole response).
func inspectResponsesFast(data []byte) (f shapeFacts, ok bool) {
	s := chunkScan{data: data}
	var seen fieldSet
	var errs errorFields
	var typ []byte
	var deltaOut, response bool
	var respUsage, topUsage responsesUsageFacts
	ok = s.payload(func() bool {
		return s.object(func(name []byte) (ok bool) {
			switch {
			case is(name, "type"):
				if !seen.once(1) {
					return false
				}
				typ, ok = s.plainString()
				return ok
			case is(name, "delta"):
				if !seen.once(2) {
					return false
				}
				var raw []byte
				raw, ok = s.rawValue()
				deltaOut = deltaHasOutput(raw)
				return ok
			case is(name, "response"):
				return seen.once(4) && s.responseObject(&response, &respUsage)
			case is(name, "usage"):
				return seen.once(8) && s.responsesUsage(&topUsage)
			}
			if handled, ok := errs.read(&s, name, &seen, 16, 32); handled {
				return ok
			}
			return s.skipValue()
		})
	})
	if !ok {
		return f, false
	}
	f.output = deltaOut && bytes.HasSuffix(typ, []byte(".delta"))
	switch string(typ) {
	case "response.completed", "response.incomplete":
		f.finished = true
	case "error", "response.failed":
		f.failed = true
	}
	f.failed = f.failed || errs.failed()
	switch {
	case response && respUsage.present:
		f.usagePresent, f.usage = true, respUsage.usage
	case topUsage.present:
		f.usagePresent, f.usage = true, topUsage.usage
	}
	return f, true
}

// responsesUsageFacts is a Responses usage object as read.
type responsesUsageFacts struct {
	present bool
	usage   Usage
}

// responseObject reads an event's "response": an object, of which only
// "usage" is read, or null.
func (s *chunkScan) responseObject(present *bool, u *responsesUsageFacts) bool {
	var seen fieldSet
	return s.nullableObject(present, func(name []byte) bool {
		if is(name, "usage") {
			return seen.once(1) && s.responsesUsage(u)
		}
		return s.skipValue()
	})
}

// responsesUsage reads a usage object (input_tokens, output_tokens,
// total_tokens), or null.
func (s *chunkScan) responsesUsage(u *responsesUsageFacts) bool {
	var seen fieldSet
	return s.nullableObject(&u.present, func(name []byte) bool {
		switch {
		case is(name, "input_tokens"):
			return seen.once(1) && s.intField(&u.usage.PromptTokens)
		case is(name, "output_tokens"):
			return seen.once(2) && s.intField(&u.usage.CompletionTokens)
		case is(name, "total_tokens"):
			return seen.once(4) && s.intField(&u.usage.TotalTokens)
		}
		return s.skipValue()
	})
}

// nullableObject reads an object field by field with fn, or null; present
// is set for an object.
func (s *chunkScan) nullableObject(present *bool, fn func(name []byte) bool) bool {
	switch s.next() {
	case 'n':
		return s.literal("null")
	case '{':
	default:
		return false
	}
	*present = true
	return s.object(fn)
}
