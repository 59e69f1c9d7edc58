package sim

import (
	"encoding/json"
	"errors"
	"fmt"
)

// genRequest is what the simulator reads from a generation request.
type genRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	IgnoreEOS           bool `json:"ignore_eos"`
	N                   *int `json:"n"`
	// Logprobs is a boolean (chat, with TopLogprobs) or a count
	// (completions).
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
	Tools       []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

// countWords counts whitespace-separated words: the simulator's tokenizer.
// With h it also feeds each word to the prefix hasher.
func countWords(s string, h *prefixHasher) int {
	n, start := 0, -1
	for i := 0; i <= len(s); i++ {
		space := i == len(s)
		if !space {
			switch s[i] {
			case ' ', '\t', '\n', '\r', '\v', '\f':
				space = true
			}
		}
		switch {
		case !space && start < 0:
			start = i
			n++
		case space && start >= 0:
			if h != nil {
				h.word(s[start:i])
			}
			start = -1
		}
	}
	return n
}

// contentWords counts the words of a chat message's content: a string, or
// an array of parts whose "text" fields count.
func contentWords(raw json.RawMessage, h *prefixHasher) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return countWords(s, h), nil
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return 0, errors.New("message content must be a string or an array of parts")
	}
	n := 0
	for _, p := range parts {
		n += countWords(p.Text, h)
	}
	return n, nil
}

// idTokens counts token IDs and feeds them to h.
func idTokens(ids []int, h *prefixHasher) int {
	if h != nil {
		for _, id := range ids {
			h.token(uint64(id))
		}
	}
	return len(ids)
}

// promptTokens counts a completion prompt: a string counts its words, an
// array of token IDs its length; a batch of one of either is accepted.
func promptTokens(raw json.RawMessage, h *prefixHasher) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errors.New("prompt is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return countWords(s, h), nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil {
		return idTokens(ids, h), nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil && len(strs) == 1 {
		return countWords(strs[0], h), nil
	}
	var idLists [][]int
	if err := json.Unmarshal(raw, &idLists); err == nil && len(idLists) == 1 {
		return idTokens(idLists[0], h), nil
	}
	return 0, errors.New("prompt must be a string or an array of token IDs (batches are not supported)")
}

// parsed is a validated generation request.
type parsed struct {
	prompt       int
	maxTokens    int
	ignoreEOS    bool
	stream       bool
	includeUsage bool
	// logprobs is the number of top logprobs per token asked for, -1 for
	// none; tool the function the answer calls (tool_choice "required",
	// the first tool, or a named function), "" for text.
	logprobs int
	tool     string
	// hasher has named the prompt's full blocks for the prefix cache (and
	// goes on with the answer's); nil when it is off.
	hasher *prefixHasher
}

// parseGen reads and validates a request against the profile's limits, as
// vLLM does: the prompt plus max_tokens must fit max_model_len. With block
// > 0 it names the prompt's full blocks of that many tokens.
func parseGen(body []byte, chat bool, p Profile, block int) (parsed, error) {
	var r genRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return parsed{}, fmt.Errorf("invalid JSON body: %w", err)
	}
	if r.N != nil && *r.N != 1 {
		return parsed{}, errors.New("only n=1 is supported")
	}
	out := parsed{ignoreEOS: r.IgnoreEOS, stream: r.Stream, logprobs: -1}
	if err := readLogprobs(&r, chat, &out); err != nil {
		return parsed{}, err
	}
	out.includeUsage = r.StreamOptions != nil && r.StreamOptions.IncludeUsage
	var h *prefixHasher
	if block > 0 {
		h = newPrefixHasher(block)
	}
	if chat {
		if len(r.Messages) == 0 {
			return parsed{}, errors.New("messages must be a non-empty array")
		}
		for _, m := range r.Messages {
			n, err := contentWords(m.Content, h)
			if err != nil {
				return parsed{}, err
			}
			out.prompt += n
		}
	} else {
		n, err := promptTokens(r.Prompt, h)
		if err != nil {
			return parsed{}, err
		}
		out.prompt = n
	}
	// An empty prompt still costs the engine a token (BOS).
	out.prompt = max(out.prompt, 1)
	out.hasher = h
	if out.prompt >= p.MaxModelLen {
		return parsed{}, fmt.Errorf("this model's maximum context length is %d tokens, but the prompt has %d", p.MaxModelLen, out.prompt)
	}
	mt := r.MaxCompletionTokens
	if mt == nil {
		mt = r.MaxTokens
	}
	if mt == nil {
		out.maxTokens = p.MaxModelLen - out.prompt
	} else {
		out.maxTokens = *mt
	}
	if out.maxTokens < 1 {
		return parsed{}, errors.New("max_tokens must be at least 1")
	}
	if out.prompt+out.maxTokens > p.MaxModelLen {
		return parsed{}, fmt.Errorf("this model's maximum context length is %d tokens; you requested %d (%d in the prompt, %d for the completion)",
			p.MaxModelLen, out.prompt+out.maxTokens, out.prompt, out.maxTokens)
	}
	return out, nil
}

// maxTopLogprobs bounds top_logprobs (vLLM's default --max-logprobs).
const maxTopLogprobs = 20

// readLogprobs reads what an answer carries besides text: logprobs
// (chat: "logprobs": true with "top_logprobs"; completions: "logprobs": k)
// and a tool call (chat: "tool_choice" "required" with tools, or naming a
// function).
func readLogprobs(r *genRequest, chat bool, out *parsed) error {
	if len(r.Logprobs) > 0 && string(r.Logprobs) != "null" {
		if chat {
			var on bool
			if err := json.Unmarshal(r.Logprobs, &on); err != nil {
				return errors.New("logprobs must be a boolean")
			}
			if on {
				out.logprobs = 0
				if r.TopLogprobs != nil {
					out.logprobs = *r.TopLogprobs
				}
			}
		} else if err := json.Unmarshal(r.Logprobs, &out.logprobs); err != nil {
			return errors.New("logprobs must be an integer")
		}
		if out.logprobs > maxTopLogprobs {
			return fmt.Errorf("logprobs: at most %d top logprobs", maxTopLogprobs)
		}
	}
	if !chat || len(r.ToolChoice) == 0 {
		return nil
	}
	var choice string
	if json.Unmarshal(r.ToolChoice, &choice) == nil {
		if choice == "required" {
			if len(r.Tools) == 0 {
				return errors.New(`tool_choice "required" needs tools`)
			}
			out.tool = r.Tools[0].Function.Name
		}
		return nil
	}
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(r.ToolChoice, &named); err != nil || named.Function.Name == "" {
		return errors.New("tool_choice must be none, auto, required or a named function")
	}
	out.tool = named.Function.Name
	return nil
}
