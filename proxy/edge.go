package proxy

import (
	"errors"
	"math"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/wire"
)

// HeaderReason names the reason of a rejection.
const HeaderReason = "X-Kneecap-Reason"

// Failure reasons recorded in slo.Record.Reason (besides the admission
// reasons queue_full, queue_timeout, deadline and draining). They are the
// X-Kneecap-Reason values, the error codes and the failure table of
// docs/gateway.md.
const (
	reasonBodyTooLarge      = "body_too_large"
	reasonBadJSON           = "invalid_json"
	reasonBadHeader         = "invalid_slo_header"
	reasonBadBody           = "unreadable_body"
	reasonUnreachable       = "upstream_unreachable"
	reasonFirstTokenTimeout = "first_token_timeout"
	reasonStreamBroken      = "stream_broken"
	reasonErrorEvent        = "engine_error_event"
	reasonEngineStatus      = "engine_status"
	reasonEventTooLarge     = "event_too_large"
	reasonStreamIdle        = "stream_idle_timeout"
	reasonResponseTimeout   = "response_timeout"
	reasonBadResponse       = "engine_bad_response"
	reasonClientTooSlow     = "client_too_slow"
	reasonBodyBudget        = "body_budget"
	reasonAnswerTooLarge    = "response_too_large"
	reasonRouteNotFound     = "route_not_found"
	reasonMethodNotAllowed  = "method_not_allowed"
	reasonPromptTooLong     = "context_length_exceeded"
)

// The failures the proxy answers. Call sites return them, wrapped with %w
// (or in a *failed) so that the cause stays for the log; the table below is
// the one place that says what each becomes.
var (
	errBadHeader     = errors.New("proxy: invalid x-slo header")
	errBodyTooLarge  = errors.New("proxy: request body too large")
	errBadBody       = errors.New("proxy: could not read the request body")
	errBadJSON       = errors.New("proxy: invalid request body")
	errPromptTooLong = errors.New("proxy: the prompt is longer than the engine's context")
	errRouteNotFound = errors.New("proxy: no such route")
	errNoMethod      = errors.New("proxy: method not allowed")
	// errBodyBudget is returned by a held body's reader when the budget of
	// body bytes held across requests has no room for more.
	errBodyBudget  = errors.New("proxy: the gateway holds as many request body bytes as it may")
	errUnreachable = errors.New("proxy: the engine could not be reached")
	// errFirstTokenTimeout is the cancel cause when the engine sent no
	// output within Config.FirstTokenTimeout.
	errFirstTokenTimeout = errors.New("proxy: no first token within the first-token timeout")
	// errResponseTimeout is the cancel cause when a request that is not
	// streamed got no response headers within Config.ResponseTimeout.
	errResponseTimeout = errors.New("proxy: no response within the response timeout")
	// errStreamIdle is the cancel cause when the engine's response body was
	// silent for longer than Config.StreamIdleTimeout.
	errStreamIdle   = errors.New("proxy: the engine's response was silent for longer than the stream-idle timeout")
	errStreamBroken = errors.New("proxy: the engine's response broke off")
	errStreamEnded  = errors.New("proxy: the engine's stream ended without [DONE] or a finish_reason")
	errErrorEvent   = errors.New("proxy: the engine sent an error event")
	errBadResponse  = errors.New("proxy: the engine's success is not JSON")
	// errAnswerTooLarge: a reassembled answer outgrew maxWholeBody.
	errAnswerTooLarge = errors.New("proxy: the reassembled answer is larger than the gateway holds")
	errEngineRefused  = errors.New("proxy: the engine refused the request (4xx)")
	errEngineFailed   = errors.New("proxy: the engine failed the request")
	errClientGone     = errors.New("proxy: the client left")
	errClientTooSlow  = errors.New("proxy: the client took no bytes within the client write timeout")
	errUnknownRefusal = errors.New("proxy: admission refused") // a RejectError of no other row
)

// A failure is one row of the edge's table: how one kind of failure is
// answered and recorded.
type failure struct {
	err     error       // the sentinel; the first row in an error's chain answers it
	status  int         // before the response headers; 0 answers nothing (the client left)
	errType string      // the OpenAI error type
	reason  string      // X-Kneecap-Reason, the error code, slo.Record.Reason
	outcome slo.Outcome // what the record is judged
	msg     string      // the message before the headers (a *failed may tell its own)
	event   string      // the SSE error event's message after the headers; "" writes none
	refusal bool        // sets Retry-After and X-Kneecap-Reason
}

// failures is the table. wire.ErrEventTooLarge comes before
// errStreamBroken: a read error wraps both.
var failures = [...]failure{
	{errBadHeader, http.StatusBadRequest, wire.TypeInvalidRequest, reasonBadHeader, slo.InvalidRequest, "", "", false},
	{errBodyTooLarge, http.StatusRequestEntityTooLarge, wire.TypeInvalidRequest, reasonBodyTooLarge, slo.InvalidRequest, "", "", false},
	{errBadBody, http.StatusBadRequest, wire.TypeInvalidRequest, reasonBadBody, slo.InvalidRequest, "could not read the request body", "", false},
	{errBadJSON, http.StatusBadRequest, wire.TypeInvalidRequest, reasonBadJSON, slo.InvalidRequest, "", "", false},
	{errPromptTooLong, http.StatusBadRequest, wire.TypeInvalidRequest, reasonPromptTooLong, slo.InvalidRequest, "", "", false},
	{errRouteNotFound, http.StatusNotFound, wire.TypeInvalidRequest, reasonRouteNotFound, 0,
		"no such route on this gateway (engine admin routes are closed unless the operator opens them)", "", false},
	{errNoMethod, http.StatusMethodNotAllowed, wire.TypeInvalidRequest, reasonMethodNotAllowed, 0, "", "", false},
	{errBodyBudget, http.StatusTooManyRequests, wire.TypeRateLimit, reasonBodyBudget, slo.Rejected,
		"the gateway holds as many request bodies as it may; retry after the Retry-After header", "", true},
	{admission.ErrQueueFull, http.StatusTooManyRequests, wire.TypeRateLimit, "queue_full", slo.Rejected,
		"the gateway's queue is full; retry after the Retry-After header", "", true},
	{admission.ErrQueueTimeout, http.StatusTooManyRequests, wire.TypeRateLimit, "queue_timeout", slo.Rejected,
		"no slot became free within the queue-wait bound; retry after the Retry-After header", "", true},
	{admission.ErrDeadline, http.StatusTooManyRequests, wire.TypeRateLimit, "deadline", slo.Rejected,
		"the request would miss its latency target if queued (time to first token; end to end for a request that is not streamed); retry after the Retry-After header", "", true},
	{admission.ErrShed, http.StatusTooManyRequests, wire.TypeRateLimit, "shed", slo.Rejected,
		"the queue was full and this request gave its place to one of higher priority or of a tenant under its share; retry after the Retry-After header", "", true},
	{admission.ErrDraining, http.StatusServiceUnavailable, wire.TypeRateLimit, "draining", slo.Rejected,
		"the gateway is shutting down; retry on another replica", "", true},
	{errUnknownRefusal, http.StatusTooManyRequests, wire.TypeRateLimit, "rejected", slo.Rejected, "", "", true},
	{errUnreachable, http.StatusBadGateway, wire.TypeServer, reasonUnreachable, slo.EngineError,
		"the engine could not be reached", "", false},
	{errFirstTokenTimeout, http.StatusGatewayTimeout, wire.TypeTimeout, reasonFirstTokenTimeout, slo.EngineError,
		"the engine sent no output within the first-token timeout", "the engine sent no output within the first-token timeout", false},
	{errResponseTimeout, http.StatusGatewayTimeout, wire.TypeTimeout, reasonResponseTimeout, slo.EngineError,
		"the engine sent no response within the response timeout", "", false},
	{errStreamIdle, http.StatusGatewayTimeout, wire.TypeTimeout, reasonStreamIdle, slo.EngineError,
		"the engine's response stalled for longer than the stream-idle timeout", "the engine's stream stalled for longer than the stream-idle timeout", false},
	{wire.ErrEventTooLarge, http.StatusBadGateway, wire.TypeServer, reasonEventTooLarge, slo.EngineError,
		"the engine sent an event larger than the gateway relays", "the engine sent an event larger than the gateway relays", false},
	{errStreamBroken, http.StatusBadGateway, wire.TypeServer, reasonStreamBroken, slo.EngineError,
		"the engine's response broke off", "the engine's stream broke off", false},
	{errStreamEnded, http.StatusBadGateway, wire.TypeServer, reasonStreamBroken, slo.EngineError,
		"the engine's stream ended early", "the engine's stream ended early", false},
	{errErrorEvent, http.StatusBadGateway, wire.TypeServer, reasonErrorEvent, slo.EngineError, "", "", false}, // the engine's own event was relayed
	{errBadResponse, http.StatusBadGateway, wire.TypeServer, reasonBadResponse, slo.EngineError, "", "", false},
	// A request asking for more than the gateway reassembles: the client's
	// to change (fewer tokens, or a stream), like a body too large, and not
	// retried by the SDKs as a 5xx would be.
	{errAnswerTooLarge, http.StatusBadRequest, wire.TypeInvalidRequest, reasonAnswerTooLarge, slo.InvalidRequest, "", "", false},
	// The engine's status, rewritten to an OpenAI error when its body is not
	// JSON (a *failed carries the status and the engine's Retry-After), or
	// relayed as it is.
	{errEngineRefused, http.StatusBadGateway, wire.TypeInvalidRequest, reasonEngineStatus, slo.InvalidRequest, "", "", false},
	{errEngineFailed, http.StatusBadGateway, wire.TypeServer, reasonEngineStatus, slo.EngineError, "", "", false},
	{errClientTooSlow, 0, "", reasonClientTooSlow, slo.ClientCancelled, "", "", false},
	{errClientGone, 0, "", "", slo.ClientCancelled, "", "", false},
}

// failureOf returns the row of err: the first whose sentinel is in err's
// chain; an admission refusal of no other row is errUnknownRefusal's, any
// other error errUnreachable's.
func failureOf(err error) *failure {
	for i := range failures {
		if errors.Is(err, failures[i].err) {
			return &failures[i]
		}
	}
	if admission.AsReject(err) != nil {
		return failureOf(errUnknownRefusal)
	}
	return failureOf(errUnreachable)
}

// failed is a failure that needs what only its call site knows: the
// message the client is told, the engine's status and Retry-After.
type failed struct {
	kind       error  // a sentinel of the table
	msg        string // "" tells the row's message
	status     int    // the engine's status (>= 400) for errEngine* rows; 0 the row's
	retryAfter string // the engine's Retry-After, kept on a rewritten error
	cause      error  // what went wrong underneath, for the log; may be nil
}

func (f *failed) Error() string {
	if f.cause != nil {
		return f.kind.Error() + ": " + f.cause.Error()
	}
	if f.msg != "" {
		return f.kind.Error() + ": " + f.msg
	}
	return f.kind.Error()
}

func (f *failed) Unwrap() []error {
	if f.cause == nil {
		return []error{f.kind}
	}
	return []error{f.kind, f.cause}
}

// tell wraps kind with the message the client is told and the cause.
func tell(kind error, msg string, cause error) error {
	return &failed{kind: kind, msg: msg, cause: cause}
}

// answer tells the client of a failure before the response headers: the
// row's status, an OpenAI-shaped error whose code is the reason, and for a
// refusal Retry-After (whole seconds, rounded up), Retry-After-Ms and
// X-Kneecap-Reason. It
// writes nothing for a client that left. It returns the row and the status
// written (0 for none).
func answer(w http.ResponseWriter, err error) (*failure, int) {
	f := failureOf(err)
	if f.status == 0 {
		return f, 0
	}
	status, msg := f.status, f.msg
	var d *failed
	if errors.As(err, &d) {
		if d.status != 0 {
			status = d.status
		}
		if d.msg != "" {
			msg = d.msg
		}
		if d.retryAfter != "" {
			w.Header().Set("Retry-After", d.retryAfter)
		}
	}
	if msg == "" {
		msg = err.Error()
	}
	if f.refusal {
		retry := time.Second // bodies held by others leave as their requests end
		if re := admission.AsReject(err); re != nil {
			retry = re.RetryAfter
		}
		w.Header().Set("Retry-After", retryAfterSeconds(retry))
		w.Header().Set("Retry-After-Ms", retryAfterMillis(retry))
		w.Header().Set(HeaderReason, f.reason)
	}
	wire.WriteError(w, status, f.errType, f.reason, msg)
	return f, status
}

// retryAfterSeconds renders a Retry-After duration as whole seconds,
// rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// retryAfterMillis renders a Retry-After duration as whole milliseconds,
// rounded up, at least 1: the retry-after-ms header, which the OpenAI SDKs
// read before Retry-After, so that a client comes back when its slot is
// predicted to free and not up to a second later.
func retryAfterMillis(d time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(float64(d)/float64(time.Millisecond)))), 10)
}

// abort records a failure before the response headers and answers it.
func (x *exchange) abort(err error) {
	f, status := answer(x.w, err)
	x.record(f, status, err)
}

// breakOff records a failure after the response headers and, where its row
// has an event, tells the client with an SSE error event (the only
// channel left).
func (x *exchange) breakOff(err error) {
	f := failureOf(err)
	x.record(f, 0, err)
	if f.event == "" {
		return
	}
	x.deadline.refresh(time.Now()) // it follows a wait on the engine
	if _, werr := x.w.Write(wire.ErrorEvent(f.errType, f.reason, f.event)); werr == nil {
		_ = x.deadline.rc.Flush()
	}
}

func (x *exchange) record(f *failure, status int, err error) {
	x.failure, x.rec.Reason, x.err = f.outcome, f.reason, err
	if status != 0 {
		x.rec.Status = status
	}
}

// clientLeft names why a client counted as gone: it took no bytes within
// the client write timeout, or it left.
func clientLeft(writeErr error) error {
	if errors.Is(writeErr, os.ErrDeadlineExceeded) {
		return &failed{kind: errClientTooSlow, cause: writeErr}
	}
	return errClientGone
}

// bodyFailure names why reading a request body failed: too large, beyond
// the body budget, the client left, or unreadable.
func bodyFailure(r *http.Request, err error, limit int64) error {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return tooLarge(limit)
	case errors.Is(err, errBodyBudget):
		return err
	case r.Context().Err() != nil:
		return errClientGone
	}
	return &failed{kind: errBadBody, cause: err}
}

func tooLarge(limit int64) error {
	return tell(errBodyTooLarge, "request body larger than "+strconv.FormatInt(limit, 10)+" bytes", nil)
}

func badHeader(err error) error { return tell(errBadHeader, err.Error(), err) }

// refused is an Acquire error as the edge answers it: a refusal, or else
// (ctx's error) the client left.
func refused(err error) error {
	if admission.AsReject(err) != nil {
		return err
	}
	return &failed{kind: errClientGone, cause: err}
}
