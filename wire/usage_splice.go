package wire

// includeUsageMember is what spliceIncludeUsage inserts.
const includeUsageMember = `"stream_options":{"include_usage":true}`

// spliceIncludeUsage returns body with includeUsageMember inserted as the
// first member of its top-level object, when that object has no
// stream_options member: the engine then reads the client's request byte
// for byte plus that member. EnsureIncludeUsage's general path decodes the
// whole body into a map and encodes it again (a copy of every prompt, keys
// sorted, <, > and & escaped), which on a streamed request without
// stream_options is the gateway's largest cost before forwarding. ok is
// false whenever the scan cannot vouch that the member is absent: a
// stream_options member (in any letter case), a member name with an escape
// or a non-ASCII byte (which a decoder may fold onto stream_options),
// nesting deeper than the scanner goes, or a body that is not one JSON
// object; the general path decides then.
func spliceIncludeUsage(body []byte) ([]byte, bool) {
	s := chunkScan{data: body}
	s.skipSpace()
	if s.next() != '{' {
		return nil, false
	}
	open := s.pos
	empty := true
	ok := s.object(func(name []byte) bool {
		empty = false
		return !is(name, "stream_options") && s.skipValue()
	})
	if !ok {
		return nil, false
	}
	s.skipSpace()
	if s.pos != len(body) {
		return nil, false
	}
	out := make([]byte, 0, len(body)+len(includeUsageMember)+1)
	out = append(out, body[:open+1]...)
	out = append(out, includeUsageMember...)
	if !empty {
		out = append(out, ',')
	}
	return append(out, body[open+1:]...), true
}
