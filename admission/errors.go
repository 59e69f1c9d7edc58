package admission

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel causes of a rejection. Every rejection the limiter returns is a
// *RejectError wrapping exactly one of them; test with errors.Is.
var (
	// ErrQueueFull: every slot was taken and the queue held MaxQueue
	// requests already. Rejected before queueing.
	ErrQueueFull = errors.New("queue full")
	// ErrQueueTimeout: the request waited in the queue for its whole
	// queue-wait bound without getting a slot. Evicted after queueing.
	ErrQueueTimeout = errors.New("queue wait bound exceeded")
	// ErrDeadline: the Gate predicted that the request would miss its TTFT
	// target if it queued. Rejected before queueing.
	ErrDeadline = errors.New("predicted to miss its TTFT target")
	// ErrDraining: the limiter is draining (the gateway is shutting down).
	ErrDraining = errors.New("draining")
	// ErrShed: the request waited in a full queue and gave its place to a
	// request of a higher class, or of a tenant with fewer waiters in its
	// class (it was sheddable). Evicted after queueing.
	ErrShed = errors.New("shed for a request of higher priority or a tenant under its share")
)

// RejectError is a refusal to grant a slot: the cause (one of the
// sentinels) and how long the client should wait before trying again.
type RejectError struct {
	// Err is one of ErrQueueFull, ErrQueueTimeout, ErrDeadline, ErrDraining,
	// ErrShed.
	Err error
	// RetryAfter is the predicted time until a slot would be free for this
	// request. It is a duration; rounding to whole seconds for the
	// Retry-After header happens at the HTTP edge.
	RetryAfter time.Duration
	// State is the limiter's state when it refused.
	State State
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("admission: %v (retry after %v)", e.Err, e.RetryAfter.Round(time.Millisecond))
}

func (e *RejectError) Unwrap() error { return e.Err }

// Reason returns the cause as a short label: "queue_full",
// "queue_timeout", "deadline", "draining" or "shed". These are the values of the
// X-Kneecap-Reason header, the error code in the body and the metric label.
func (e *RejectError) Reason() string {
	switch e.Err {
	case ErrQueueFull:
		return "queue_full"
	case ErrQueueTimeout:
		return "queue_timeout"
	case ErrDeadline:
		return "deadline"
	case ErrDraining:
		return "draining"
	case ErrShed:
		return "shed"
	}
	return "rejected"
}

// AsReject returns the *RejectError in err's chain, or nil.
func AsReject(err error) *RejectError {
	var re *RejectError
	if errors.As(err, &re) {
		return re
	}
	return nil
}
