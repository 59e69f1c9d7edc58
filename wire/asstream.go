package wire

import (
	"encoding/json"
)

// WholeOnly are the request fields that keep a request that is not
// streamed from being reassembled from a stream (see AsStream): each
// changes what the non-streamed answer holds in a way no stream shows, or
// changes the request's meaning when it is streamed. Reason is the label
// the gateway records.
var WholeOnly = []struct {
	Field, Reason string
	// Set is the test of the field's value: "any" (present and not null)
	// or "true" (present and true, or for a number, not 0 or 1).
	Set string
}{
	// Engines refuse stream_options without stream (vLLM: 400): the
	// engine answers as it would.
	{"stream_options", "stream_options", "any"},
	// vLLM: prompt logprobs, the prompt's token ids and the transfer
	// parameters of disaggregated prefill are in the non-streamed answer
	// only.
	{"prompt_logprobs", "prompt_logprobs", "any"},
	{"return_token_ids", "return_token_ids", "true"},
	{"kv_transfer_params", "kv_transfer_params", "any"},
	// vLLM: beam search and best_of choose among candidates at the end; a
	// stream shows none or refuses.
	{"use_beam_search", "beam_search", "true"},
	{"best_of", "best_of", "true"},
	// echo puts the prompt in the answer; streamed, vLLM sends it in a
	// chunk of its own (with its logprobs) that reassembles differently.
	{"echo", "echo", "true"},
	// SGLang: hidden states are in the non-streamed answer only.
	{"return_hidden_states", "return_hidden_states", "true"},
	// llama.cpp: response_fields picks fields of the non-streamed answer.
	{"response_fields", "response_fields", "any"},
}

// AsStream returns the body of an OpenAI chat or text completion request
// that is not streamed, rewritten to ask for a stream with the usage
// report ("stream": true, "stream_options": {"include_usage": true}), every
// other field kept, so that its answer can be measured as a stream and
// reassembled (Assembler). When a field of WholeOnly is set, it returns
// nil and that field's reason instead: the request must be relayed whole.
// The body must be a JSON object (ParseRequest has read it).
func AsStream(body []byte) (out []byte, whole string, err error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, "", err
	}
	for _, f := range WholeOnly {
		v, ok := obj[f.Field]
		if !ok || isNull(v) {
			continue
		}
		if f.Set == "any" || (string(v) != "false" && string(v) != "0" && string(v) != "1") {
			return nil, f.Reason, nil
		}
	}
	obj["stream"] = json.RawMessage("true")
	obj["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	out, err = json.Marshal(obj)
	return out, "", err
}
