package wire

import (
	"bytes"
	"encoding/json"
)

// Usage is the token accounting an engine reports for one request.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// CachedTokens is the prompt tokens the engine served from its prefix
	// cache, as Inspect read them: usage.prompt_tokens_details.
	// cached_tokens (vLLM, SGLang, OpenAI), else llama.cpp's timings.
	// cache_n in the same chunk; 0 when neither is given. It is read,
	// never written (an engine's own field names say where it came from).
	CachedTokens int `json:"-"`
}

// ChatChunk is one streamed chunk of POST /v1/chat/completions
// (object "chat.completion.chunk").
type ChatChunk struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// ChatChoice is one choice of a ChatChunk.
type ChatChoice struct {
	Index        int       `json:"index"`
	Delta        ChatDelta `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
}

// ChatDelta is the increment a chat chunk carries. Nil pointers are omitted,
// so a role-only chunk carries no content field at all.
type ChatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        json.RawMessage `json:"tool_calls,omitempty"`
}

// CompletionChunk is one streamed chunk of POST /v1/completions
// (object "text_completion").
type CompletionChunk struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// CompletionChoice is one choice of a CompletionChunk.
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
}

// ChunkInfo is what a measurement needs to know about one streamed chunk.
type ChunkInfo struct {
	// HasOutput is true when some choice carries generated output: content,
	// text, reasoning content or a tool call. A role-only or finish-only
	// chunk has none.
	HasOutput bool
	// Usage is the chunk's usage report, or nil.
	Usage *Usage
	// UsageOnly is true for the chunk that stream_options.include_usage adds:
	// a usage report with an empty choices list.
	UsageOnly bool
	// Finished is true when some choice carries a finish_reason.
	Finished bool
	// Error is true when the payload is an error object instead of a chunk
	// (engines send {"error": ...} or {"object": "error"} mid-stream).
	Error bool
}

// inspected is the union of the fields Inspect reads from chat and text
// completion chunks; everything else in the payload is skipped.
type inspected struct {
	Object  string `json:"object"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			Reasoning        string          `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		Usage
		Details json.RawMessage `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error   json.RawMessage `json:"error"`
	Timings json.RawMessage `json:"timings"`
}

// cachedTokens reads the cached prompt tokens from a usage report's
// prompt_tokens_details (its cached_tokens) or, without one, llama.cpp's
// timings (cache_n), each given as the raw JSON of its value: leniently (a
// value that is not a whole number reads as none, never failing the
// chunk) and without allocating. Both of Inspect's paths call it on the
// same bytes.
func cachedTokens(details, timings []byte) int {
	if n := intMember(details, "cached_tokens"); n > 0 {
		return n
	}
	return max(intMember(timings, "cache_n"), 0)
}

// intMember returns the integer member key of the JSON object raw (the
// last one when repeated; keys matched as encoding/json matches them, in
// ASCII), or 0 when raw is not an object or the member is absent, null or
// not an integer.
func intMember(raw []byte, key string) int {
	s := chunkScan{data: raw}
	s.skipSpace()
	if s.next() != '{' {
		return 0
	}
	n := 0
	ok := s.object(func(name []byte) bool {
		if !is(name, key) {
			return s.skipValue()
		}
		n = 0
		return s.intField(&n)
	})
	if !ok {
		return 0
	}
	return n
}

// Inspect reads one chunk payload (an SSE event's data, without "data: ").
// It returns an error only when the payload is not JSON or a field it reads
// has the wrong type. It does not allocate, except for the Usage it returns.
func Inspect(data []byte) (ChunkInfo, error) {
	f, ok := inspectFast(data)
	if !ok {
		return inspectSlow(data)
	}
	info := ChunkInfo{
		HasOutput: f.output,
		Finished:  f.finished,
		Error:     f.errorObject || f.errorField,
		UsageOnly: f.usagePresent && !f.choicesNonEmpty,
	}
	if f.usagePresent {
		u := f.usage
		if f.details != nil || f.timings != nil {
			u.CachedTokens = cachedTokens(f.details, f.timings)
		}
		info.Usage = &u
	}
	return info, nil
}

// inspectSlow is Inspect by encoding/json: the definition of Inspect's
// answer, used where the fast path cannot vouch for its own.
func inspectSlow(data []byte) (ChunkInfo, error) {
	var c inspected
	if err := json.Unmarshal(data, &c); err != nil {
		return ChunkInfo{}, err
	}
	var info ChunkInfo
	if c.Usage != nil {
		u := c.Usage.Usage
		if c.Usage.Details != nil || c.Timings != nil {
			u.CachedTokens = cachedTokens(c.Usage.Details, c.Timings)
		}
		info.Usage = &u
	}
	info.Error = (len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null"))) || c.Object == "error"
	info.UsageOnly = c.Usage != nil && len(c.Choices) == 0
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Text != "" || ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" ||
			ch.Delta.Reasoning != "" || hasToolCalls(ch.Delta.ToolCalls) {
			info.HasOutput = true
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			info.Finished = true
		}
	}
	return info, nil
}

func hasToolCalls(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) && !bytes.Equal(raw, []byte("[]"))
}
