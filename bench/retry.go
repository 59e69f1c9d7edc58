package bench

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Clients is what a closed-loop user does with a request that was
// refused or failed. A refusal is an error in someone's application unless
// the client retries it, and clients differ in how they do:
//
//   - ClientsNext (the zero value): the user drops the request, waits the
//     server's Retry-After (at most Config.RetryAfterMax; without it, or
//     without a Retry-After, a moment) and sends its next request, forever.
//     Nothing counts as given up: its demand simply comes back.
//   - ClientsSDK: the OpenAI SDKs (Python, Node, Go) as they retry by
//     default: the same request again, at most SDKMaxRetries times, after a
//     408, 409, 429, 5xx or a broken connection; each time waiting the
//     server's retry-after-ms, else its Retry-After, when it is more than 0
//     and at most SDKMaxRetryAfter, and otherwise backing off 0.5 s,
//     doubling, at most 8 s, less up to a quarter at random; each attempt
//     carries X-Stainless-Retry-Count (0 on the first), as the SDKs send it.
//     A request refused on its last attempt has failed (GaveUp) and the user
//     sends its next request.
//   - ClientsNone: vLLM's and SGLang's benchmark clients: a refused or
//     failed request has failed (GaveUp), and the user sends its next
//     request at once.
type Clients int

const (
	ClientsNext Clients = iota
	ClientsSDK
	ClientsNone
)

// The OpenAI SDKs' retry defaults (openai-python's _base_client.py and
// openai-node's core: max_retries 2, INITIAL_RETRY_DELAY 0.5 s,
// MAX_RETRY_DELAY 8 s, a server's wait honoured when 0 < wait <= 60 s).
const (
	SDKMaxRetries     = 2
	SDKMaxRetryAfter  = 60 * time.Second
	sdkInitialBackoff = 500 * time.Millisecond
	sdkMaxBackoff     = 8 * time.Second
)

func (c Clients) String() string {
	switch c {
	case ClientsSDK:
		return "sdk"
	case ClientsNone:
		return "none"
	}
	return "next"
}

// ParseClients reads a Clients by its name: "next" (or "forever"), "sdk"
// or "none".
func ParseClients(s string) (Clients, error) {
	switch strings.ToLower(s) {
	case "next", "forever":
		return ClientsNext, nil
	case "sdk", "openai":
		return ClientsSDK, nil
	case "none", "never":
		return ClientsNone, nil
	}
	return 0, fmt.Errorf("bench: clients %q: want next, sdk or none", s)
}

// MarshalText makes Clients readable in JSON.
func (c Clients) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// sdkRetries reports whether the OpenAI SDKs retry a request that ended as
// rec did: a connection error, 408, 409, 429 or any 5xx.
func sdkRetries(rec Record) bool {
	if rec.Outcome != Rejected && rec.Outcome != Failed {
		return false
	}
	switch s := rec.Status; {
	case s == 0:
		return rec.Err != "" // a transport error, not a broken stream
	case s == http.StatusRequestTimeout, s == http.StatusConflict, s == http.StatusTooManyRequests, s >= 500:
		return true
	}
	return false
}

// sdkDelay is how long the OpenAI SDKs wait before retry number n (0 for
// the first retry) after rec: the server's wait when it gave one in (0,
// 60 s], else the backoff with jitter.
func sdkDelay(rec Record, n int, rng *rand.Rand) time.Duration {
	if rec.RetryAfter > 0 && rec.RetryAfter <= SDKMaxRetryAfter {
		return rec.RetryAfter
	}
	d := sdkInitialBackoff << min(n, 10)
	d = min(d, sdkMaxBackoff)
	return time.Duration(float64(d) * (1 - 0.25*rng.Float64()))
}

// parseRetryAfterMs reads the retry-after-ms header (milliseconds, a
// number), which the OpenAI SDKs prefer to Retry-After; 0 when absent or
// not a number of at least 0.
func parseRetryAfterMs(v string) time.Duration {
	if v == "" {
		return 0
	}
	ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(ms >= 0) || ms > float64(24*time.Hour/time.Millisecond) {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}
