package admission

import (
	"time"

	"github.com/kneecap/kneecap/slo"
)

// Request is what the limiter knows about a request that asks for a slot.
type Request struct {
	// Arrival is when the gateway received the request (before reading its
	// body); a Gate measures the time already spent from it.
	Arrival time.Time
	// Targets are the request's latency targets after header overrides.
	Targets slo.Targets
	// MaxWait bounds this request's time in the queue (the caller's
	// setting, e.g. the gateway's KNEECAP_MAX_QUEUE_WAIT or the request's
	// TTFT target). Zero means unbounded: it waits until it gets a slot or
	// its context ends.
	MaxWait time.Duration
	// Class is the request's priority class: an index into
	// Config.Classes, 0 the highest. Out of range means the lowest.
	Class int
	// Tenant names whose fair share the request counts to within its
	// class (see Fairness); "" is one anonymous tenant. The limiter keeps
	// it as given: the caller bounds its length and never passes a secret.
	Tenant string
	// PromptTokens is the request's prompt in tokens as the caller
	// estimates it before the engine answers (0: unknown); MaxOutput is its
	// bound on output tokens over all its choices (0: none given). The
	// token budget (SetCosts) reads them.
	PromptTokens, MaxOutput int
	// Fingerprint identifies the request when its client sends it again
	// after a refusal (its tenant, route and body, hashed by the caller);
	// 0: not known. Retries is its client's count of its earlier attempts
	// (the OpenAI SDKs' X-Stainless-Retry-Count), -1 when it does not say.
	// A count of 0 or more (the zero value too) also says the client is an
	// SDK, which waits out a Retry-After of up to 60 s (see
	// control.Query.SDK). See Limiter.Outside.
	Fingerprint uint64
	Retries     int

	refusals int       // times refused before (set by Acquire)
	since    time.Time // its first refusal (set by Acquire)
}

// State is a snapshot of the limiter, as hooks and rejections see it.
type State struct {
	// Now is when the snapshot was taken.
	Now time.Time
	// Limit is the current cap; Running holds slots; Queued waits.
	Limit, Running, Queued int
	// Position is the 1-based place in the queue the request in question
	// would take (or, for a queue timeout, held). 0 when not queueing.
	Position int
	// MeanHold is the measured mean time a slot is held, an exponentially
	// weighted mean over recent releases (weight 1/8 for the newest). Before
	// the first release it is the mean age of the slots held now, and 0
	// when none is held.
	MeanHold time.Duration
	// Draining is true once Drain was called.
	Draining bool
	// Prefilling is the number of granted requests still waiting for
	// their first token under pacing (see Limiter.SetPacing), and
	// PrefillAge the time since the oldest of them was granted; both 0
	// without pacing.
	Prefilling int
	PrefillAge time.Duration
	// PrefillWait is, for a request about to queue, the predicted time
	// until a prefill of it could start without pushing a prefill under
	// way past its deadline (see SetCosts); 0 without Costs or with none
	// under way.
	PrefillWait time.Duration
	// PrefillOwn is, for a request about to queue, its own predicted
	// prefill on the engine as it runs now (0 without Costs).
	PrefillOwn time.Duration
	// PrefillTokens is the prompt tokens (estimated) of the granted
	// requests still waiting for their first token, and ResidentKV the KV
	// tokens the running requests hold (see Limiter.ResidentKV).
	PrefillTokens, ResidentKV int
	// Honoured is the longest Retry-After the clients are seen to wait
	// out (OutsideStats.Honoured); 0: none seen to cut one short.
	Honoured time.Duration
	// TenantShort is true when a tenant runs every request it has, none
	// waiting, and fewer than its weighted share of its class's running
	// requests, beside other tenants: the queue cannot serve it more, a
	// lower cap (each request faster) can. TenantBounded is true when
	// such a tenant (running every request it has) runs no more than
	// every tenant with more demand than it runs: a slot more would go to
	// a tenant no worse off, and slow it. Set by DecisionState only (see
	// its tenants' peaks).
	TenantShort, TenantBounded bool
}

// Gate may refuse a request at once instead of letting it queue to fail:
// for example when its predicted wait plus the predicted engine TTFT
// exceeds req.Targets.TTFT (reason "deadline").
//
// The limiter consults the Gate only when a request would have to queue;
// a request that can run at once is never refused by it. Admit is called
// without the limiter's lock held, so it may call the Limiter's read
// methods, and its answer is taken as given even if the state moved on.
type Gate interface {
	// Admit returns ok to let req queue. When it refuses, retryAfter is the
	// time the client should wait; zero or less means "use the limiter's
	// estimate".
	Admit(req Request, s State) (ok bool, retryAfter time.Duration)
}

// Refuser is told of every refusal the limiter decides itself (queue
// full, queue timeout, draining; and a Gate's refusal that gave no
// Retry-After) and answers the Retry-After to send. It is a command, not a
// query: a controller counts the refusal as demand beyond the cap, and
// reserves the slot time it promises so that the next refused request is
// sent to a later release.
type Refuser interface {
	// Refused returns the time req should wait before trying again, given
	// s (whose Position is where req would stand in the queue). Zero or
	// less means "use the limiter's own estimate".
	Refused(req Request, s State) (retryAfter time.Duration)
}

// Hooks are the optional decision points of a Limiter. A nil field means
// none: every request that fits the queue may queue, and Retry-After is the
// limiter's own estimate (see EstimateRetryAfter).
type Hooks struct {
	Gate    Gate
	Refuser Refuser
}

// EstimateRetryAfter is the limiter's own prediction of the time until a
// slot frees for the request at queue position s.Position: slots free at a
// rate of Limit / MeanHold, so the p-th release is expected after
// p x MeanHold / Limit. With nothing measured yet (no slot held and none
// released) it returns 0 and the caller falls back to the queue-wait bound.
func EstimateRetryAfter(s State) time.Duration {
	p := max(s.Position, 1)
	return s.MeanHold * time.Duration(p) / time.Duration(max(s.Limit, 1))
}
