package proxy

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/wire"
)

// HeaderReason names the reason of a rejection.
const HeaderReason = "X-Kneecap-Reason"

// Failure reasons recorded in slo.Record.Reason (besides the admission
// reasons queue_full, queue_timeout, deadline and draining).
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
	reasonRouteNotFound     = "route_not_found"
	reasonMethodNotAllowed  = "method_not_allowed"
)

// errFirstTokenTimeout is the cancel cause when the engine sent no output
// within Config.FirstTokenTimeout.
var errFirstTokenTimeout = errors.New("proxy: no first token within the first-token timeout")

// errStreamIdle is the cancel cause when the engine's response body was
// silent for longer than Config.StreamIdleTimeout.
var errStreamIdle = errors.New("proxy: the engine's response was silent for longer than the stream-idle timeout")

// errResponseTimeout is the cancel cause when a request that is not
// streamed got no response headers within Config.ResponseTimeout.
var errResponseTimeout = errors.New("proxy: no response within the response timeout")

// retryAfterSeconds renders a Retry-After duration as whole seconds,
// rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// writeReject is the one place where an admission refusal becomes HTTP:
// 429 (503 while draining), Retry-After, X-Kneecap-Reason and an
// OpenAI-shaped body whose code is the reason. It returns the status.
func writeReject(w http.ResponseWriter, re *admission.RejectError) int {
	status := http.StatusTooManyRequests
	if errors.Is(re, admission.ErrDraining) {
		status = http.StatusServiceUnavailable
	}
	h := w.Header()
	h.Set("Retry-After", retryAfterSeconds(re.RetryAfter))
	h.Set(HeaderReason, re.Reason())
	wire.WriteError(w, status, wire.TypeRateLimit, re.Reason(), rejectMessage(re))
	return status
}

func rejectMessage(re *admission.RejectError) string {
	switch re.Reason() {
	case "queue_full":
		return "the gateway's queue is full; retry after the Retry-After header"
	case "queue_timeout":
		return "no slot became free within the queue-wait bound; retry after the Retry-After header"
	case "deadline":
		return "the request would miss its time-to-first-token target if queued; retry after the Retry-After header"
	case "draining":
		return "the gateway is shutting down; retry on another replica"
	}
	return re.Error()
}
