package wire

import (
	"encoding/json"
	"net/http"
)

// Error types used in OpenAI-shaped error bodies.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeRateLimit      = "rate_limit_error" // 429: rejected by admission
	TypeServer         = "server_error"
	TypeUnavailable    = "service_unavailable"
	TypeTimeout        = "timeout_error"
)

// ErrorBody is the JSON body of every error a client sees:
// {"error": {"message": ..., "type": ..., "param": null, "code": ...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inner object of an ErrorBody.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	// Code is a short machine-readable reason such as "queue_full", or nil.
	Code *string `json:"code"`
}

// NewError builds an ErrorBody; an empty code is encoded as null.
func NewError(errType, code, message string) ErrorBody {
	b := ErrorBody{Error: ErrorDetail{Message: message, Type: errType}}
	if code != "" {
		b.Error.Code = &code
	}
	return b
}

// JSON returns the encoded body.
func (b ErrorBody) JSON() []byte {
	out, _ := json.Marshal(b) // cannot fail: only strings and nils
	return out
}

// WriteError writes an OpenAI-shaped JSON error response with the given
// status. Headers already set on w (Retry-After, a reason header) are kept.
func WriteError(w http.ResponseWriter, status int, errType, code, message string) {
	body := NewError(errType, code, message).JSON()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// ErrorEvent returns an SSE data event carrying an error body, for failures
// after a stream's headers were sent.
func ErrorEvent(errType, code, message string) []byte {
	return AppendData(nil, NewError(errType, code, message).JSON())
}
