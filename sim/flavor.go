package sim

import (
	"fmt"
	"strconv"
)

// Flavor names the engine whose stream shapes the simulator emits.
type Flavor string

// The flavours. They differ where real engines differ and a gateway must
// cope: whether a chat stream starts with a role-only chunk, whether the
// finish_reason rides on the last token's chunk or comes in a chunk of its
// own, and whether usage comes in a usage-only chunk (choices: []) when
// stream_options.include_usage asks for it, or always in the last chunk.
const (
	// FlavorVLLM: role chunk first (chat), finish_reason on the last token's
	// chunk, usage-only chunk when asked.
	FlavorVLLM Flavor = "vllm"
	// FlavorSGLang: role chunk first (chat), "usage":null on every chunk, a
	// separate finish chunk, usage-only chunk when asked.
	FlavorSGLang Flavor = "sglang"
	// FlavorLlamaCpp: no role chunk, a separate finish chunk that always
	// carries usage, no usage-only chunk.
	FlavorLlamaCpp Flavor = "llamacpp"
)

// Flavors lists the flavours.
func Flavors() []Flavor { return []Flavor{FlavorVLLM, FlavorSGLang, FlavorLlamaCpp} }

type flavor struct {
	name           Flavor
	roleChunk      bool
	finishSeparate bool
	usageInLast    bool
	// prefixBlock is the prefix cache's block size in tokens when the
	// profile leaves it to the flavour: vLLM's default on GPUs; SGLang's
	// radix tree matches single tokens, approximated by blocks of 4;
	// llama.cpp matches tokens of a slot's previous prompt, approximated
	// by vLLM's blocks.
	prefixBlock int
}

func lookupFlavor(f Flavor) (flavor, error) {
	switch f {
	case "", FlavorVLLM:
		return flavor{name: FlavorVLLM, roleChunk: true, prefixBlock: 16}, nil
	case FlavorSGLang:
		return flavor{name: FlavorSGLang, roleChunk: true, finishSeparate: true, prefixBlock: 4}, nil
	case FlavorLlamaCpp:
		return flavor{name: FlavorLlamaCpp, finishSeparate: true, usageInLast: true, prefixBlock: 16}, nil
	}
	return flavor{}, fmt.Errorf("unknown flavor %q (have vllm, sglang, llamacpp)", f)
}

// words are the simulated tokens: plain ASCII, so they need no JSON escaping.
var words = [...]string{" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", "."}

func appendTokens(dst []byte, from, to int) []byte {
	for i := from; i < to; i++ {
		dst = append(dst, words[i%len(words)]...)
	}
	return dst
}

// chunker encodes one response's chunks by appending bytes: the shapes are
// fixed, so no JSON encoder runs per token.
type chunker struct {
	fl      flavor
	chat    bool
	id      string
	created int64
	model   []byte // JSON-encoded
	prompt  int
	// lp is the number of top logprobs per token the request asked for
	// (vllm flavour), -1 for no logprobs; tool is the function a chat
	// answer calls instead of writing text (vllm flavour), "" for none;
	// total is the answer's output tokens (where a tool call's arguments
	// end).
	lp    int
	tool  string
	total int
	// prefix is whether the engine has a prefix cache (Profile.PrefixCaching):
	// usage then reports cached, the prompt tokens it served.
	prefix bool
	cached int
}

// usage appends a usage object; with a prefix cache, vLLM's and SGLang's
// prompt_tokens_details, or llama.cpp's timings after it.
func (c *chunker) usage(dst []byte, completion int) []byte {
	dst = appendUsage(dst, c.prompt, completion)
	if !c.prefix {
		return dst
	}
	if c.fl.name == FlavorLlamaCpp {
		dst = append(dst, `,"timings":{"cache_n":`...)
		dst = strconv.AppendInt(dst, int64(c.cached), 10)
		dst = append(dst, `,"prompt_n":`...)
		dst = strconv.AppendInt(dst, int64(c.prompt-c.cached), 10)
		return append(dst, '}')
	}
	return c.appendDetails(dst[:len(dst)-1])
}

// appendDetails appends prompt_tokens_details and closes the usage object.
func (c *chunker) appendDetails(dst []byte) []byte {
	if !c.prefix {
		return append(dst, `,"prompt_tokens_details":null}`...)
	}
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(c.cached), 10)
	return append(dst, "}}"...)
}

// head appends the fields before "choices" for the vllm and sglang flavours.
func (c *chunker) head(dst []byte) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, c.id...)
	if c.chat {
		dst = append(dst, `","object":"chat.completion.chunk","created":`...)
	} else {
		dst = append(dst, `","object":"text_completion","created":`...)
	}
	dst = strconv.AppendInt(dst, c.created, 10)
	dst = append(dst, `,"model":`...)
	return append(dst, c.model...)
}

// tail appends llama.cpp's fields after "choices".
func (c *chunker) tail(dst []byte) []byte {
	dst = append(dst, `,"created":`...)
	dst = strconv.AppendInt(dst, c.created, 10)
	dst = append(dst, `,"id":"`...)
	dst = append(dst, c.id...)
	dst = append(dst, `","model":`...)
	dst = append(dst, c.model...)
	if c.chat {
		return append(dst, `,"system_fingerprint":"kneecap-sim","object":"chat.completion.chunk"`...)
	}
	return append(dst, `,"system_fingerprint":"kneecap-sim","object":"text_completion"`...)
}

func appendFinish(dst []byte, reason string) []byte {
	if reason == "" {
		return append(dst, "null"...)
	}
	dst = append(dst, '"')
	dst = append(dst, reason...)
	return append(dst, '"')
}

func appendUsage(dst []byte, prompt, completion int) []byte {
	dst = append(dst, `"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt+completion), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(completion), 10)
	return append(dst, '}')
}

// start appends the chunk that opens a stream, if the flavour has one.
func (c *chunker) start(dst []byte) []byte {
	if !c.chat || !c.fl.roleChunk {
		return dst
	}
	dst = append(dst, "data: "...)
	dst = c.head(dst)
	dst = append(dst, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null`...)
	if c.fl.name == FlavorSGLang {
		dst = append(dst, `,"matched_stop":null}],"usage":null}`...)
	} else {
		dst = append(dst, `}]}`...)
	}
	return append(dst, "\n\n"...)
}

// tokens appends one chunk carrying output tokens [from, to). reason is the
// finish_reason to put on it ("" for none); flavours with a separate finish
// chunk never pass one.
func (c *chunker) tokens(dst []byte, from, to int, reason string) []byte {
	dst = append(dst, "data: "...)
	switch c.fl.name {
	case FlavorLlamaCpp:
		if c.chat {
			dst = append(dst, `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"`...)
			dst = appendTokens(dst, from, to)
			dst = append(dst, `"}}]`...)
		} else {
			dst = append(dst, `{"choices":[{"text":"`...)
			dst = appendTokens(dst, from, to)
			dst = append(dst, `","index":0,"logprobs":null,"finish_reason":null}]`...)
		}
		dst = c.tail(dst)
		dst = append(dst, '}')
	default:
		dst = c.head(dst)
		switch {
		case c.chat && c.tool != "":
			dst = append(dst, `,"choices":[{"index":0,"delta":{"tool_calls":[{`...)
			if from == 0 {
				dst = append(dst, `"id":"`...)
				dst = c.appendToolID(dst)
				dst = append(dst, `","type":"function","index":0,"function":{"name":"`...)
				dst = append(dst, c.tool...)
				dst = append(dst, `","arguments":"`...)
			} else {
				dst = append(dst, `"index":0,"function":{"arguments":"`...)
			}
			dst = c.appendArgs(dst, from, to)
			dst = append(dst, `"}}]},"logprobs":`...)
		case c.chat:
			dst = append(dst, `,"choices":[{"index":0,"delta":{"content":"`...)
			dst = appendTokens(dst, from, to)
			dst = append(dst, `"},"logprobs":`...)
		default:
			dst = append(dst, `,"choices":[{"index":0,"text":"`...)
			dst = appendTokens(dst, from, to)
			dst = append(dst, `","logprobs":`...)
		}
		dst = c.appendLogprobs(dst, from, to)
		dst = append(dst, `,"finish_reason":`...)
		dst = appendFinish(dst, c.finish(reason))
		switch {
		case c.fl.name == FlavorSGLang:
			dst = append(dst, `,"matched_stop":null}],"usage":null}`...)
		case c.chat && reason == "":
			dst = append(dst, `}]}`...) // vLLM: stop_reason only with the finish
		default:
			dst = append(dst, `,"stop_reason":null}]}`...)
		}
	}
	return append(dst, "\n\n"...)
}

// finish is the finish_reason of an answer that ended for reason: a tool
// call's ends with "tool_calls", as vLLM's parser reports it.
func (c *chunker) finish(reason string) string {
	if reason != "" && c.tool != "" {
		return "tool_calls"
	}
	return reason
}

// end appends what follows the last token: the separate finish chunk (with
// usage for llama.cpp), the usage-only chunk when asked, and [DONE].
func (c *chunker) end(dst []byte, reason string, completion int, includeUsage bool) []byte {
	if c.fl.finishSeparate {
		dst = append(dst, "data: "...)
		if c.fl.name == FlavorLlamaCpp {
			if c.chat {
				dst = append(dst, `{"choices":[{"finish_reason":`...)
				dst = appendFinish(dst, reason)
				dst = append(dst, `,"index":0,"delta":{}}]`...)
			} else {
				dst = append(dst, `{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":`...)
				dst = appendFinish(dst, reason)
				dst = append(dst, `}]`...)
			}
			dst = c.tail(dst)
			dst = append(dst, ',')
			dst = c.usage(dst, completion)
			dst = append(dst, '}')
		} else {
			dst = c.head(dst)
			if c.chat {
				dst = append(dst, `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
			} else {
				dst = append(dst, `,"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":`...)
			}
			dst = appendFinish(dst, reason)
			dst = append(dst, `,"matched_stop":null}],"usage":null}`...)
		}
		dst = append(dst, "\n\n"...)
	}
	if includeUsage && !c.fl.usageInLast {
		dst = append(dst, "data: "...)
		dst = c.head(dst)
		dst = append(dst, `,"choices":[],`...)
		dst = c.usage(dst, completion)
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...)
}

// whole appends the body of a non-streamed response, in the flavour's
// form: vLLM's model_dump of its response (every field, nulls included),
// SGLang's, or llama.cpp's to_json_oaicompat; the same values its stream
// adds up to.
func (c *chunker) whole(dst []byte, reason string, completion int) []byte {
	reason = c.finish(reason)
	switch c.fl.name {
	case FlavorLlamaCpp:
		if c.chat {
			dst = append(dst, `{"choices":[{"finish_reason":`...)
			dst = appendFinish(dst, reason)
			dst = append(dst, `,"index":0,"message":{"role":"assistant","content":"`...)
			dst = appendTokens(dst, 0, completion)
			dst = append(dst, `"}}]`...)
		} else {
			dst = append(dst, `{"choices":[{"text":"`...)
			dst = appendTokens(dst, 0, completion)
			dst = append(dst, `","index":0,"logprobs":null,"finish_reason":`...)
			dst = appendFinish(dst, reason)
			dst = append(dst, `}]`...)
		}
		dst = append(dst, `,"created":`...)
		dst = strconv.AppendInt(dst, c.created, 10)
		dst = append(dst, `,"model":`...)
		dst = append(dst, c.model...)
		if c.chat {
			dst = append(dst, `,"system_fingerprint":"kneecap-sim","object":"chat.completion",`...)
		} else {
			dst = append(dst, `,"system_fingerprint":"kneecap-sim","object":"text_completion",`...)
		}
		dst = c.usage(dst, completion)
		dst = append(dst, `,"id":"`...)
		dst = append(dst, c.id...)
		return append(dst, "\"}\n"...)
	case FlavorSGLang:
		dst = c.wholeHead(dst)
		if c.chat {
			dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":"`...)
			dst = appendTokens(dst, 0, completion)
			dst = append(dst, `","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":`...)
		} else {
			dst = append(dst, `,"choices":[{"index":0,"text":"`...)
			dst = appendTokens(dst, 0, completion)
			dst = append(dst, `","logprobs":null,"finish_reason":`...)
		}
		dst = appendFinish(dst, reason)
		dst = append(dst, `,"matched_stop":null}],`...)
		dst = c.wholeUsage(dst, completion)
		return append(dst, "}\n"...)
	}
	dst = c.wholeHead(dst)
	if c.chat {
		dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		if c.tool != "" {
			dst = append(dst, `null,"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[{"id":"`...)
			dst = c.appendToolID(dst)
			dst = append(dst, `","type":"function","function":{"name":"`...)
			dst = append(dst, c.tool...)
			dst = append(dst, `","arguments":"`...)
			dst = c.appendArgs(dst, 0, completion)
			dst = append(dst, `"}}]`...)
		} else {
			dst = append(dst, '"')
			dst = appendTokens(dst, 0, completion)
			dst = append(dst, `","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[]`...)
		}
		dst = append(dst, `,"reasoning_content":null},"logprobs":`...)
	} else {
		dst = append(dst, `,"choices":[{"index":0,"text":"`...)
		dst = appendTokens(dst, 0, completion)
		dst = append(dst, `","logprobs":`...)
	}
	dst = c.appendLogprobs(dst, 0, completion)
	dst = append(dst, `,"finish_reason":`...)
	dst = appendFinish(dst, reason)
	if c.chat {
		dst = append(dst, `,"stop_reason":null}],"service_tier":null,"system_fingerprint":null,`...)
		dst = c.wholeUsage(dst, completion)
		return append(dst, `,"prompt_logprobs":null,"kv_transfer_params":null}`+"\n"...)
	}
	dst = append(dst, `,"stop_reason":null,"prompt_logprobs":null}],"service_tier":null,"system_fingerprint":null,`...)
	dst = c.wholeUsage(dst, completion)
	return append(dst, `,"kv_transfer_params":null}`+"\n"...)
}

// wholeHead appends the fields before "choices" of a non-streamed answer
// (vllm and sglang flavours).
func (c *chunker) wholeHead(dst []byte) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, c.id...)
	if c.chat {
		dst = append(dst, `","object":"chat.completion","created":`...)
	} else {
		dst = append(dst, `","object":"text_completion","created":`...)
	}
	dst = strconv.AppendInt(dst, c.created, 10)
	dst = append(dst, `,"model":`...)
	return append(dst, c.model...)
}

// wholeUsage appends usage as vLLM's and SGLang's non-streamed answers
// have it: with prompt_tokens_details (null without a prefix cache).
func (c *chunker) wholeUsage(dst []byte, completion int) []byte {
	dst = appendUsage(dst, c.prompt, completion)
	return c.appendDetails(dst[:len(dst)-1])
}
