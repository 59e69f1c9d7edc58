package wire

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Request is the part of a generation request (chat or text completion) that
// a gateway or client acts on. Every other field passes through untouched.
// [ParseRequestAs] fills it from the other request shapes too: MaxTokens then
// holds that shape's own limit on output tokens.
type Request struct {
	Model               string         `json:"model"`
	Stream              bool           `json:"stream"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	// N is the number of choices asked for ("n"), 0 when absent.
	N int `json:"n,omitempty"`
}

// StreamOptions is the request's stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// WantsUsage reports whether the client itself asked for the usage chunk.
func (r Request) WantsUsage() bool { return r.StreamOptions != nil && r.StreamOptions.IncludeUsage }

// ErrNotObject is returned for a body that is JSON but not a JSON object.
var ErrNotObject = errors.New("request body must be a JSON object")

var errNotJSON = errors.New("request body is not valid JSON")

// maxN is the largest n (number of choices) ParseRequest accepts, as the
// OpenAI API does.
const maxN = 128

// ParseRequest reads the fields of Request from a chat or text completion
// request body. It fails on malformed JSON, on a body that is not an object,
// on fields of the wrong type and on an n outside 1..128. Integer fields
// are read as vLLM reads them (pydantic): any JSON number with no fractional
// part is accepted, so 256, 256.0 and 2.56e2 are all 256, while 256.5 or a
// string is an error. Unknown fields are ignored.
func ParseRequest(body []byte) (Request, error) {
	f, fast := parseOpenAIFast(body)
	var err error
	if !fast {
		f = openAIRequest{}
		err = decodeBody(body, &f)
	}
	r := Request{Model: f.Model, Stream: f.Stream, StreamOptions: f.StreamOptions,
		MaxTokens: f.MaxTokens.ptr(), MaxCompletionTokens: f.MaxCompletionTokens.ptr(), N: f.N.v}
	if err != nil {
		return r, err
	}
	if err := firstError(f.MaxTokens.check("max_tokens"), f.MaxCompletionTokens.check("max_completion_tokens"),
		f.N.check("n")); err != nil {
		return r, err
	}
	if f.N.set && (f.N.v < 1 || f.N.v > maxN) {
		return r, errBadN
	}
	return r, nil
}

var errBadN = fmt.Errorf("n must be between 1 and %d", maxN)

// openAIRequest is what ParseRequest decodes.
type openAIRequest struct {
	Model               string         `json:"model"`
	Stream              bool           `json:"stream"`
	StreamOptions       *StreamOptions `json:"stream_options"`
	MaxTokens           wholeNumber    `json:"max_tokens"`
	MaxCompletionTokens wholeNumber    `json:"max_completion_tokens"`
	N                   wholeNumber    `json:"n"`
}

// decodeBody decodes a request body into v and turns encoding/json's errors
// into the messages a client sees.
func decodeBody(body []byte, v any) error {
	// Unmarshal checks the whole body's syntax before it decodes anything,
	// so a syntax error leaves v as it was, and the body is scanned once.
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errNotJSON
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return ErrNotObject
		}
		return fmt.Errorf("field %q must be of type %s", te.Field, te.Type)
	}
	return err
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// EnsureIncludeUsage returns body with stream_options.include_usage set to
// true, keeping every other field (including other stream_options) as it was.
// The body must be a JSON object. Without a stream_options member the body
// keeps its bytes and gains that member first (spliceIncludeUsage);
// otherwise it is encoded anew, keys sorted.
func EnsureIncludeUsage(body []byte) ([]byte, error) {
	if out, ok := spliceIncludeUsage(body); ok {
		return out, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, err
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := obj["stream_options"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, fmt.Errorf("stream_options must be an object: %w", err)
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	obj["stream_options"] = raw
	return json.Marshal(obj)
}
