package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// ErrAnswerTooLarge is returned by Assembler.Add when the answer being
// reassembled would exceed the Assembler's bound.
var ErrAnswerTooLarge = errors.New("wire: reassembled answer larger than its bound")

// Assembler builds, from the chunks of an OpenAI-shaped chat or text
// completion stream (object "chat.completion.chunk" or
// "text_completion"), the single JSON body the engine answers the same
// request with when it is not streamed. The gateway asks the engine to
// stream a request its client did not stream, measures the stream, and
// answers the client with Body.
//
// What the chunks carry is merged as a client library accumulates a
// stream (the OpenAI SDKs' stream accumulators), into the non-streamed
// form:
//
//   - choices are merged by their "index" and listed in index order (n > 1
//     included); a chat choice's "delta" becomes its "message";
//   - in a message (and in a choice's "logprobs"), strings are
//     concatenated (content, reasoning_content or reasoning, a tool call's
//     function name and arguments, refusal), arrays too (logprobs.content,
//     a completion's text_offset, token_logprobs, tokens and
//     top_logprobs), objects are merged member by member, and null adds
//     nothing; "role", and a tool call's "id" and "type", are taken from
//     the first chunk that has them (engines that repeat them are not
//     concatenated); tool_calls are merged by their "index" into whole
//     calls without it; a message always has "role" (the engine's, or
//     "assistant") and "content": null when the stream had none, or only
//     the empty string vLLM's first chunk carries before tool calls (its
//     non-streamed answer, llama.cpp's and OpenAI's have null there);
//   - a completion choice's "text" is concatenated;
//   - every other field of a choice (finish_reason, stop_reason,
//     matched_stop, ...) and of the top level (id, created, model,
//     system_fingerprint, usage, llama.cpp's timings, ...) takes its last
//     value that is not null, so ids and timestamps are the engine's own;
//   - "object" "chat.completion.chunk" becomes "chat.completion"
//     ("text_completion" is the same in both forms).
//
// Fields keep the order in which the stream first showed them (a chat
// message: role, content, tool_calls, then the rest): the order of vLLM's
// non-streamed answer, and of llama.cpp's but for where it puts "id"
// (after "usage"). Fields that only the non-streamed answer has cannot be
// derived and are absent (vLLM sends them as null unless the request asks
// for them: the gateway relays such requests whole, see AsStream).
//
// An Assembler is not safe for concurrent use; the zero value is not
// usable: call NewAssembler.
type Assembler struct {
	limit int
	held  int
	top   *node
}

// NewAssembler returns an Assembler whose merged answer may hold at most
// limit bytes of the stream's values (the body it writes is a little
// larger: keys and punctuation); zero means no bound.
func NewAssembler(limit int) *Assembler {
	return &Assembler{limit: limit, top: &node{kind: kindObject}}
}

// Add merges one chunk: an SSE event's data, not an error payload and not
// [DONE]. It fails on data that is not a JSON object, and with
// ErrAnswerTooLarge once the answer outgrows the bound; the Assembler is
// not usable after an error.
func (a *Assembler) Add(data []byte) error {
	if !json.Valid(data) {
		return errors.New("wire: chunk is not valid JSON")
	}
	return a.AddInspected(data)
}

// AddInspected is Add for data that Inspect or InspectAs accepted, which
// they accept only when it is valid JSON: it skips Add's own check of the
// syntax (a fifth of the reassembly's time). Data that is not valid JSON
// makes a body that is not either.
func (a *Assembler) AddInspected(data []byte) error {
	ok := members(data, func(k, v []byte) {
		if keyIs(k, "choices") {
			f := a.field(a.top, k, kindIndexed)
			elements(v, func(c []byte) { a.choice(f, c) }) // null: nothing to merge
			return
		}
		a.last(a.field(a.top, k, kindRaw), v)
	})
	if !ok {
		return ErrNotObject
	}
	if a.limit > 0 && a.held > a.limit {
		return fmt.Errorf("%w (%d bytes)", ErrAnswerTooLarge, a.limit)
	}
	return nil
}

// Held is the number of bytes of values the answer holds so far.
func (a *Assembler) Held() int { return a.held }

// nodeKind is how a node merges what later chunks say.
type nodeKind uint8

const (
	kindRaw     nodeKind = iota // a value, replaced (or kept: first)
	kindString                  // a string, concatenated
	kindArray                   // an array, concatenated
	kindObject                  // an object, merged member by member
	kindIndexed                 // an array of objects merged by "index"
)

// node is one value of the answer being built.
type node struct {
	kind nodeKind
	set  bool   // a value that is not null was merged
	raw  []byte // kindRaw: the value; kindString, kindArray: the interior
	// kindObject: members in the order first seen (keys with quotes).
	keys [][]byte
	vals []*node
	// kindIndexed: the objects by index.
	items map[int]*node
}

// field returns the member of obj named by the raw key k, adding it (of
// kind kind) if new.
func (a *Assembler) field(obj *node, k []byte, kind nodeKind) *node {
	for i, key := range obj.keys {
		if sameKey(key, k) {
			return obj.vals[i]
		}
	}
	n := &node{kind: kind}
	obj.keys = append(obj.keys, bytes.Clone(k))
	obj.vals = append(obj.vals, n)
	a.held += len(k)
	return n
}

// sameKey reports whether two raw keys name the same member: the same
// bytes, or, where either has an escape ("cont\u0065nt"), the same
// decoded string.
func sameKey(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if bytes.IndexByte(a, '\\') < 0 && bytes.IndexByte(b, '\\') < 0 {
		return false
	}
	var x, y string
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && x == y
}

// named returns obj's member name, or nil.
func (obj *node) named(name string) *node {
	for i, key := range obj.keys {
		if keyIs(key, name) {
			return obj.vals[i]
		}
	}
	return nil
}

// last makes v the node's value unless it is null.
func (a *Assembler) last(n *node, v []byte) {
	if isNull(v) {
		return
	}
	n.kind, n.set = kindRaw, true
	a.held += len(v)
	n.raw = append(n.raw[:0], v...)
}

// first makes v the node's value if it has none yet (an empty string is
// none: an engine may open with "" and send the value later).
func (a *Assembler) first(n *node, v []byte) {
	if n.set || isNull(v) || string(v) == `""` {
		return
	}
	a.last(n, v)
}

// messageKey is the key a chat choice's delta is merged under (field
// copies it when it adds it; a conversion at each chunk allocated).
var messageKey = []byte(`"message"`)

// member is one member of an object, its key with its quotes.
type member struct{ k, v []byte }

// choice merges one element of a chunk's choices.
func (a *Assembler) choice(choices *node, c []byte) {
	// One scan: the members are kept (on the stack for a choice of up to
	// eight) until "index" says which choice they are.
	var buf [8]member
	ms := buf[:0]
	idx := 0
	members(c, func(k, v []byte) {
		if keyIs(k, "index") {
			if i, ok := rawIndex(v); ok {
				idx = i
			}
		}
		ms = append(ms, member{k, v})
	})
	ch := a.item(choices, idx)
	for _, m := range ms {
		k, v := m.k, m.v
		switch {
		case keyIs(k, "delta"), keyIs(k, "message"):
			a.accumulate(a.field(ch, messageKey, kindObject), v)
		case keyIs(k, "text"), keyIs(k, "logprobs"):
			a.accumulate(a.field(ch, k, kindRaw), v)
		default:
			a.last(a.field(ch, k, kindRaw), v)
		}
	}
}

// itemCost is what a choice or a tool call counts to the bound when it is
// added, beside its values: about what it costs in memory and in the body.
const itemCost = 64

// item returns the object at index idx of an indexed node, adding it.
func (a *Assembler) item(n *node, idx int) *node {
	if n.items == nil {
		n.items = map[int]*node{}
	}
	it := n.items[idx]
	if it == nil {
		it = &node{kind: kindObject, set: true}
		n.items[idx] = it
		a.held += itemCost // so that many indices cannot outgrow the bound unseen
	}
	n.set = true
	return it
}

// accumulate merges v into n as stream deltas merge: strings and arrays
// concatenate, objects merge member by member, null adds nothing, any
// other value replaces.
func (a *Assembler) accumulate(n *node, v []byte) {
	if isNull(v) {
		return
	}
	switch v[0] {
	case '"':
		if n.kind != kindString {
			n.kind, n.raw = kindString, n.raw[:0]
		}
		a.appendInterior(n, v, false)
	case '[':
		if n.kind != kindArray {
			n.kind, n.raw = kindArray, n.raw[:0]
		}
		a.appendInterior(n, v, true)
	case '{':
		if n.kind != kindObject {
			*n = node{kind: kindObject}
		}
		n.set = true
		members(v, func(k, mv []byte) {
			switch {
			case keyIs(k, "role"), keyIs(k, "id"), keyIs(k, "type"):
				a.first(a.field(n, k, kindRaw), mv)
			case keyIs(k, "tool_calls"):
				a.toolCalls(a.field(n, k, kindIndexed), mv)
			default:
				a.accumulate(a.field(n, k, kindRaw), mv)
			}
		})
	default:
		a.last(n, v)
	}
}

// appendInterior appends a string's or an array's interior to n.
func (a *Assembler) appendInterior(n *node, v []byte, array bool) {
	in := interior(v, array)
	n.set = true
	if len(in) == 0 {
		return
	}
	if array && len(n.raw) > 0 {
		n.raw = append(n.raw, ',')
	}
	n.raw = append(n.raw, in...)
	a.held += len(in)
}

// toolCalls merges a delta's tool_calls: each by its "index" (its place
// in the list when it has none), "index" itself left out.
func (a *Assembler) toolCalls(n *node, v []byte) {
	if n.kind != kindIndexed {
		*n = node{kind: kindIndexed}
	}
	pos := 0
	elements(v, func(tc []byte) {
		idx := pos
		pos++
		members(tc, func(k, mv []byte) {
			if keyIs(k, "index") {
				if i, ok := rawIndex(mv); ok {
					idx = i
				}
			}
		})
		call := a.item(n, idx)
		members(tc, func(k, mv []byte) {
			switch {
			case keyIs(k, "index"):
			case keyIs(k, "id"), keyIs(k, "type"):
				a.first(a.field(call, k, kindRaw), mv)
			default:
				a.accumulate(a.field(call, k, kindRaw), mv)
			}
		})
	})
}

// Body returns the reassembled answer.
func (a *Assembler) Body() []byte {
	out := make([]byte, 0, a.held+a.held/4+256)
	out = append(out, '{')
	for i, k := range a.top.keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, k...)
		out = append(out, ':')
		v := a.top.vals[i]
		switch {
		case keyIs(k, "choices"):
			out = writeIndexed(out, v, writeChoice)
		case keyIs(k, "object") && string(v.raw) == `"chat.completion.chunk"`:
			out = append(out, `"chat.completion"`...)
		default:
			out = writeNode(out, v)
		}
	}
	return append(out, '}')
}

// writeNode appends n's value (null if it never had one).
func writeNode(out []byte, n *node) []byte {
	if !n.set {
		return append(out, "null"...)
	}
	switch n.kind {
	case kindString:
		out = append(out, '"')
		out = append(out, n.raw...)
		return append(out, '"')
	case kindArray:
		out = append(out, '[')
		out = append(out, n.raw...)
		return append(out, ']')
	case kindObject:
		return writeObject(out, n, nil)
	case kindIndexed:
		return writeIndexed(out, n, writeNode)
	}
	return append(out, n.raw...)
}

// writeObject appends an object's members in order, skipping those named
// in skip.
func writeObject(out []byte, n *node, skip []string) []byte {
	out = append(out, '{')
	first := true
	for i, k := range n.keys {
		if slices.ContainsFunc(skip, func(s string) bool { return keyIs(k, s) }) {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, k...)
		out = append(out, ':')
		out = writeNode(out, n.vals[i])
	}
	return append(out, '}')
}

// writeIndexed appends the objects of an indexed node as an array in
// index order, each written by write.
func writeIndexed(out []byte, n *node, write func([]byte, *node) []byte) []byte {
	idx := make([]int, 0, len(n.items))
	for i := range n.items {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	out = append(out, '[')
	for j, i := range idx {
		if j > 0 {
			out = append(out, ',')
		}
		out = write(out, n.items[i])
	}
	return append(out, ']')
}

// writeChoice appends a choice, its message (if it has one) in the
// non-streamed form.
func writeChoice(out []byte, ch *node) []byte {
	out = append(out, '{')
	for i, k := range ch.keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, k...)
		out = append(out, ':')
		if keyIs(k, "message") {
			out = writeMessage(out, ch.vals[i])
		} else {
			out = writeNode(out, ch.vals[i])
		}
	}
	return append(out, '}')
}

// writeMessage appends a chat message: role (the engine's, or
// "assistant"), content (null when the stream had none), tool_calls (when
// the stream had the field), then the rest in the order the stream showed
// them.
func writeMessage(out []byte, m *node) []byte {
	out = append(out, `{"role":`...)
	if r := m.named("role"); r != nil && r.set {
		out = writeNode(out, r)
	} else {
		out = append(out, `"assistant"`...)
	}
	out = append(out, `,"content":`...)
	tc := m.named("tool_calls")
	calls := tc != nil && tc.set && len(tc.items) > 0
	if c := m.named("content"); c != nil && !(calls && c.kind == kindString && len(c.raw) == 0) {
		out = writeNode(out, c)
	} else {
		out = append(out, "null"...) // none, or only the "" an engine opens with before its tool calls
	}
	if tc != nil {
		out = append(out, `,"tool_calls":`...)
		out = writeNode(out, tc)
	}
	rest := writeObject(nil, m, []string{"role", "content", "tool_calls"})
	if len(rest) > 2 {
		out = append(out, ',')
		out = append(out, rest[1:len(rest)-1]...)
	}
	return append(out, '}')
}
