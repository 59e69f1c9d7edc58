package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Shape is the body and stream format of a generation route. The gateway
// reads every shape's request with [ParseRequestAs] and every shape's events
// with [InspectAs]; [ChunkInfo] means the same for all of them.
type Shape uint8

const (
	// ShapeOpenAI is OpenAI chat and text completions: /v1/chat/completions
	// and /v1/completions on every engine, and llama.cpp's /chat/completions
	// alias. What [ParseRequest] and [Inspect] read. Note that llama.cpp's
	// /completions (no /v1) is not an alias of /v1/completions: it is the
	// native /completion, ShapeLlamaCpp.
	ShapeOpenAI Shape = iota
	// ShapeResponses is the OpenAI Responses API, vLLM's /v1/responses: the
	// request has "max_output_tokens"; the stream is typed events
	// ("event: <type>" then "data: {"type": "<type>", ...}") with no [DONE].
	ShapeResponses
	// ShapeLlamaCpp is llama.cpp's native completion: /completion,
	// /completions and /infill. The request has "n_predict"; every event is
	// {"content": ..., "stop": false, "tokens_predicted": ...}, the last one
	// has "stop": true and the usage, and there is no [DONE].
	ShapeLlamaCpp
	// ShapeSGLang is SGLang's native /generate: the request has
	// "sampling_params": {"max_new_tokens": ...}; every event is
	// {"text": ..., "meta_info": {"finish_reason": ..., "prompt_tokens": ...,
	// "completion_tokens": ...}} and the stream ends with [DONE].
	ShapeSGLang
)

func (s Shape) String() string {
	switch s {
	case ShapeOpenAI:
		return "openai"
	case ShapeResponses:
		return "responses"
	case ShapeLlamaCpp:
		return "llamacpp"
	case ShapeSGLang:
		return "sglang"
	}
	return fmt.Sprintf("Shape(%d)", uint8(s))
}

func errUnknownShape(s Shape) error { return fmt.Errorf("wire: unknown shape %d", uint8(s)) }

// ParseRequestAs reads the fields the gateway acts on from a request body of
// shape s: Stream, Model, the shape's own limit on output tokens (stored in
// MaxTokens) and N. ShapeOpenAI is [ParseRequest]. Each shape's fields are
// read as its engine reads them, so the gateway rejects a body only where
// the engine would:
//   - ShapeResponses (vLLM, pydantic): "max_output_tokens" must be a whole
//     number (256.0 is 256); "model" a string, "stream" a boolean. The API
//     has no n: N is 0.
//   - ShapeSGLang: "sampling_params" is an object or a list of objects (a
//     batch: MaxTokens is the largest "max_new_tokens", N the first "n");
//     numbers are read as for ShapeResponses; "stream" must be a boolean.
//     /generate has no "model"; one that is a string is read, any other is
//     ignored.
//   - ShapeLlamaCpp (json_value over nlohmann::json): a field of the wrong
//     type is taken as absent, never an error; numbers are truncated toward
//     zero. MaxTokens is the first present of "n_predict",
//     "max_completion_tokens", "max_tokens" (-1 means no limit), N the first
//     of "n_cmpl", "n".
//
// Only ParseRequest checks that N is within 1..128. Every shape fails on a
// body that is not JSON or not an object.
func ParseRequestAs(s Shape, body []byte) (Request, error) {
	switch s {
	case ShapeOpenAI:
		return ParseRequest(body)
	case ShapeResponses:
		var f responsesRequest
		err := decodeBody(body, &f)
		r := Request{Model: f.Model, Stream: f.Stream, MaxTokens: f.MaxOutputTokens.ptr()}
		if err == nil {
			err = f.MaxOutputTokens.check("max_output_tokens")
		}
		return r, err
	case ShapeLlamaCpp:
		return parseLlamaCppRequest(body)
	case ShapeSGLang:
		return parseSGLangRequest(body)
	}
	return Request{}, errUnknownShape(s)
}

// responsesRequest is what ParseRequestAs decodes from a Responses API body.
type responsesRequest struct {
	Model           string      `json:"model"`
	Stream          bool        `json:"stream"`
	MaxOutputTokens wholeNumber `json:"max_output_tokens"`
}

// llamaCppRequest is what ParseRequestAs decodes from a llama.cpp native
// completion body (params_from_json_cmpl in llama.cpp's server).
type llamaCppRequest struct {
	Model               looseString `json:"model"`
	Stream              looseBool   `json:"stream"`
	NPredict            looseInt    `json:"n_predict"`
	MaxCompletionTokens looseInt    `json:"max_completion_tokens"`
	MaxTokens           looseInt    `json:"max_tokens"`
	NCmpl               looseInt    `json:"n_cmpl"`
	N                   looseInt    `json:"n"`
}

func parseLlamaCppRequest(body []byte) (Request, error) {
	var f llamaCppRequest
	if err := decodeBody(body, &f); err != nil {
		return Request{}, err // only not JSON, or not an object: no field is ever of the wrong type
	}
	r := Request{Model: f.Model.v, Stream: f.Stream.v}
	for _, n := range [...]looseInt{f.NPredict, f.MaxCompletionTokens, f.MaxTokens} {
		if n.set {
			v := n.v
			r.MaxTokens = &v
			break
		}
	}
	switch {
	case f.NCmpl.set:
		r.N = f.NCmpl.v
	case f.N.set:
		r.N = f.N.v
	}
	return r, nil
}

// sglangRequest is what ParseRequestAs decodes from an SGLang /generate body
// (GenerateReqInput).
type sglangRequest struct {
	Model          looseString     `json:"model"`
	Stream         bool            `json:"stream"`
	SamplingParams json.RawMessage `json:"sampling_params"`
}

// sglangSampling is the part of one sampling_params object read.
type sglangSampling struct {
	MaxNewTokens wholeNumber `json:"max_new_tokens"`
	N            wholeNumber `json:"n"`
}

var errSamplingParams = errors.New(`field "sampling_params" must be an object or a list of objects`)

func parseSGLangRequest(body []byte) (Request, error) {
	var f sglangRequest
	err := decodeBody(body, &f)
	r := Request{Model: f.Model.v, Stream: f.Stream}
	if err != nil {
		return r, err
	}
	var params []*sglangSampling
	list := false
	switch raw := f.SamplingParams; {
	case len(raw) == 0 || string(raw) == "null":
		return r, nil
	case raw[0] == '{':
		var p sglangSampling
		if err := json.Unmarshal(raw, &p); err != nil {
			return r, err // cannot happen: every field takes any value
		}
		params = []*sglangSampling{&p}
	case raw[0] == '[':
		if err := json.Unmarshal(raw, &params); err != nil {
			return r, errSamplingParams
		}
		list = true
	default:
		return r, errSamplingParams
	}
	for i, p := range params {
		if p == nil {
			continue
		}
		field := "sampling_params."
		if list {
			field = fmt.Sprintf("sampling_params[%d].", i)
		}
		if err := firstError(p.MaxNewTokens.check(field+"max_new_tokens"), p.N.check(field+"n")); err != nil {
			return r, err
		}
		if p.MaxNewTokens.set && (r.MaxTokens == nil || p.MaxNewTokens.v > *r.MaxTokens) {
			r.MaxTokens = p.MaxNewTokens.ptr()
		}
		if i == 0 {
			r.N = p.N.v
		}
	}
	return r, nil
}

// InspectAs reads one SSE data payload of shape s (without "data: "); like
// [Inspect], it also reads a whole non-streamed response body of the shape
// for its usage. ShapeOpenAI is [Inspect]. The ChunkInfo fields mean the
// same for every shape:
//   - HasOutput: the event carries output (text, reasoning or tool-call
//     arguments).
//   - Usage: the prompt and completion tokens, when the event reports them.
//     SGLang reports them in every event and llama.cpp in every event of
//     recent versions, so the last one seen is the request's. TotalTokens
//     is the sum where the engine reports no total.
//   - Finished: the output ended (a finish or stop marker).
//   - Error: an error event; on every shape that includes the OpenAI-shaped
//     {"error": ...} or {"object": "error"} payloads that the engines and
//     the gateway itself send mid-stream.
//   - UsageOnly: only for ShapeOpenAI.
//
// Per shape:
//   - ShapeResponses: HasOutput for any "*.delta" event (output text,
//     reasoning text or summary, function-call or tool arguments) with a
//     non-empty "delta"; Usage from response.usage (input_tokens,
//     output_tokens, total_tokens); Finished for "response.completed" and
//     "response.incomplete"; Error for "error" and "response.failed".
//   - ShapeLlamaCpp: HasOutput for a non-empty "content"; Usage from
//     tokens_evaluated (prompt) and tokens_predicted (completion); Finished
//     for "stop": true.
//   - ShapeSGLang: HasOutput when "text" is non-empty or
//     meta_info.completion_tokens > 0 (the text is cumulative unless the
//     server streams increments); Usage from meta_info; Finished when
//     meta_info.finish_reason is not null; Error, with Finished, when it is
//     {"type": "abort", ...}, how SGLang ends a request it failed.
//
// It returns an error only when the payload is not JSON or a field it reads
// has the wrong type. It allocates nothing but the Usage it returns, except
// on rare inputs (escaped or repeated keys, deep nesting) that go to
// encoding/json.
func InspectAs(s Shape, data []byte) (ChunkInfo, error) {
	var f shapeFacts
	var ok bool
	switch s {
	case ShapeOpenAI:
		return Inspect(data)
	case ShapeResponses:
		if f, ok = inspectResponsesFast(data); !ok {
			return inspectResponsesSlow(data)
		}
	case ShapeLlamaCpp:
		if f, ok = inspectLlamaCppFast(data); !ok {
			return inspectLlamaCppSlow(data)
		}
	case ShapeSGLang:
		if f, ok = inspectSGLangFast(data); !ok {
			return inspectSGLangSlow(data)
		}
	default:
		return ChunkInfo{}, errUnknownShape(s)
	}
	return f.info(), nil
}

// shapeFacts is what a reader of a non-OpenAI shape found in one payload.
type shapeFacts struct {
	output, finished, failed bool
	usagePresent             bool
	usage                    Usage
}

func (f *shapeFacts) info() ChunkInfo {
	info := ChunkInfo{HasOutput: f.output, Finished: f.finished, Error: f.failed}
	if f.usagePresent {
		u := f.usage
		info.Usage = &u
	}
	return info
}

// The slow readers below are encoding/json decoders: they define each
// shape's answer, and the fast scanners in shape_scan.go must give the same
// one (a differential fuzz test holds them to it).

// isErrorPayload reports whether a payload's "object" and "error" fields make
// it an error event.
func isErrorPayload(object string, errField json.RawMessage) bool {
	return object == "error" || (len(errField) > 0 && !bytes.Equal(errField, []byte("null")))
}

func inspectLlamaCppSlow(data []byte) (ChunkInfo, error) {
	var e struct {
		Content         string          `json:"content"`
		Stop            bool            `json:"stop"`
		TokensPredicted *int            `json:"tokens_predicted"`
		TokensEvaluated *int            `json:"tokens_evaluated"`
		Object          string          `json:"object"`
		Error           json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return ChunkInfo{}, err
	}
	f := shapeFacts{output: e.Content != "", finished: e.Stop, failed: isErrorPayload(e.Object, e.Error)}
	if e.TokensPredicted != nil || e.TokensEvaluated != nil {
		f.usagePresent = true
		f.usage = sumUsage(e.TokensEvaluated, e.TokensPredicted)
	}
	return f.info(), nil
}

// sumUsage is a usage report from prompt and completion counts, either of
// which may be missing (zero).
func sumUsage(prompt, completion *int) Usage {
	var u Usage
	if prompt != nil {
		u.PromptTokens = *prompt
	}
	if completion != nil {
		u.CompletionTokens = *completion
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func inspectSGLangSlow(data []byte) (ChunkInfo, error) {
	var e struct {
		Text     string `json:"text"`
		MetaInfo *struct {
			FinishReason     json.RawMessage `json:"finish_reason"`
			PromptTokens     *int            `json:"prompt_tokens"`
			CompletionTokens *int            `json:"completion_tokens"`
		} `json:"meta_info"`
		Object string          `json:"object"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return ChunkInfo{}, err
	}
	f := shapeFacts{output: e.Text != "", failed: isErrorPayload(e.Object, e.Error)}
	if m := e.MetaInfo; m != nil {
		if m.CompletionTokens != nil && *m.CompletionTokens > 0 {
			f.output = true
		}
		if m.PromptTokens != nil || m.CompletionTokens != nil {
			f.usagePresent = true
			f.usage = sumUsage(m.PromptTokens, m.CompletionTokens)
		}
		if fr := m.FinishReason; len(fr) > 0 && !bytes.Equal(fr, []byte("null")) {
			f.finished = true
			if fr[0] == '{' {
				var reason struct {
					Type string `json:"type"`
				}
				if err := json.Unmarshal(fr, &reason); err != nil {
					return ChunkInfo{}, err
				}
				f.failed = f.failed || reason.Type == "abort"
			}
		}
	}
	return f.info(), nil
}

// responsesUsage is the Responses API's usage object.
type responsesUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

func (u *responsesUsage) usage() Usage {
	return Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.TotalTokens}
}

func inspectResponsesSlow(data []byte) (ChunkInfo, error) {
	var e struct {
		Type     string          `json:"type"`
		Delta    json.RawMessage `json:"delta"`
		Response *struct {
			Usage *responsesUsage `json:"usage"`
		} `json:"response"`
		Usage  *responsesUsage `json:"usage"` // a whole non-streamed response
		Object string          `json:"object"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return ChunkInfo{}, err
	}
	f := shapeFacts{
		output:   strings.HasSuffix(e.Type, ".delta") && deltaHasOutput(e.Delta),
		finished: e.Type == "response.completed" || e.Type == "response.incomplete",
		failed:   e.Type == "error" || e.Type == "response.failed" || isErrorPayload(e.Object, e.Error),
	}
	switch {
	case e.Response != nil && e.Response.Usage != nil:
		f.usagePresent, f.usage = true, e.Response.Usage.usage()
	case e.Usage != nil:
		f.usagePresent, f.usage = true, e.Usage.usage()
	}
	return f.info(), nil
}

// deltaHasOutput reports whether a Responses event's "delta" (a string in
// the API; an object in some servers) carries anything: it is not missing,
// null, "", {} or [].
func deltaHasOutput(raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	switch raw[0] {
	case 'n':
		return false
	case '"':
		return len(raw) > 2
	case '{', '[':
		return len(bytes.TrimSpace(raw[1:len(raw)-1])) > 0
	}
	return true
}
