package wire

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Request is the part of a generation request (chat or text completion) that
// a gateway or client acts on. Every other field passes through untouched.
type Request struct {
	Model               string         `json:"model"`
	Stream              bool           `json:"stream"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
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

// ParseRequest reads the fields of Request from a request body. It fails on
// malformed JSON, on a body that is not an object, and on fields of the
// wrong type.
func ParseRequest(body []byte) (Request, error) {
	var r Request
	// Unmarshal checks the whole body's syntax before it decodes anything,
	// so a syntax error leaves r as it was, and the body is scanned once.
	if err := json.Unmarshal(body, &r); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return Request{}, errNotJSON
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return r, ErrNotObject
			}
			return r, fmt.Errorf("field %q must be of type %s", te.Field, te.Type)
		}
		return r, err
	}
	return r, nil
}

// EnsureIncludeUsage returns body with stream_options.include_usage set to
// true, keeping every other field (including other stream_options) as it was.
// The body must be a JSON object.
func EnsureIncludeUsage(body []byte) ([]byte, error) {
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
