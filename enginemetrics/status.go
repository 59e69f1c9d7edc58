package enginemetrics

import (
	"math"
	"strconv"
	"time"
)

// Float is a float64 that encodes NaN and infinities as JSON null.
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// Status is the scraper's state for /status. Durations are in seconds.
type Status struct {
	// URL is the endpoint scraped, its password redacted; empty when off.
	URL             string `json:"url,omitempty"`
	State           State  `json:"state"`
	IntervalSeconds Float  `json:"interval_seconds,omitempty"`
	// Fresh says whether Latest would answer ok.
	Fresh bool `json:"fresh"`
	// Reading is the newest reading, if any, fresh or not.
	Reading *ReadingStatus `json:"reading,omitempty"`
	// LastError is the last failure, kept after a recovery;
	// LastErrorAgeSeconds how long ago it was.
	LastError           string `json:"last_error,omitempty"`
	LastErrorAgeSeconds Float  `json:"last_error_age_seconds,omitempty"`
	Scrapes             int64  `json:"scrapes"`
	Failures            int64  `json:"failures"`
}

// ReadingStatus is a Reading in /status: unknown values are null.
type ReadingStatus struct {
	AgeSeconds  Float  `json:"age_seconds"`
	Engine      string `json:"engine"`
	KVUsage     Float  `json:"kv_usage_ratio"`
	KVTokens    Float  `json:"kv_tokens"`
	KVCapacity  Float  `json:"kv_capacity_tokens"`
	Running     Float  `json:"running"`
	Waiting     Float  `json:"waiting"`
	Preemptions Float  `json:"preemptions"`
}

// Status returns the scraper's state. On a nil Scraper it is StateOff.
func (s *Scraper) Status() Status {
	if s == nil {
		return Status{State: StateOff}
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		URL: s.redacted, State: s.state, IntervalSeconds: Float(s.interval.Seconds()),
		LastError: s.lastErr, Scrapes: s.scrapes, Failures: s.failures,
	}
	if s.lastErr != "" {
		st.LastErrorAgeSeconds = Float(now.Sub(s.lastErrAt).Seconds())
	}
	if s.has {
		r := s.latest
		st.Fresh = now.Sub(r.At) < staleAfter*s.interval
		st.Reading = &ReadingStatus{
			AgeSeconds: Float(now.Sub(r.At).Seconds()), Engine: r.Engine,
			KVUsage: Float(r.KVUsage), KVTokens: Float(r.KVTokens), KVCapacity: Float(r.KVCapacity),
			Running: Float(r.Running), Waiting: Float(r.Waiting), Preemptions: Float(r.Preemptions),
		}
	}
	return st
}

// The log budget: a line is written when the state differs from the one
// the last line named, at most logBurst lines at once and then one per
// logRefill, so that an endpoint that flaps between two states every
// second writes a few lines, not one a second, and the state it settles
// in is still written within logRefill.
const (
	logBurst  = 4
	logRefill = time.Minute
)

// logLimiter decides when a change of state is written. Guarded by
// Scraper.mu.
type logLimiter struct {
	logged     State // the state the last line named
	tokens     float64
	at         time.Time // of the last refill
	suppressed int       // changes not written since the last line
}

// change is what one log line says.
type change struct {
	from, to   State
	suppressed int
}

// next is called after every scrape with its state; it returns the line to
// write, if one is due.
func (l *logLimiter) next(now time.Time, state State) (change, bool) {
	if !l.at.IsZero() {
		l.tokens = min(logBurst, l.tokens+float64(now.Sub(l.at))/float64(logRefill))
	}
	l.at = now
	if state == l.logged {
		return change{}, false
	}
	if l.tokens < 1 {
		l.suppressed++
		return change{}, false
	}
	l.tokens--
	c := change{from: l.logged, to: state, suppressed: l.suppressed}
	l.logged, l.suppressed = state, 0
	return c, true
}

// logChange writes one line for a change of state.
func (s *Scraper) logChange(c change, r Reading, err error) {
	attrs := []any{"url", s.redacted, "state", string(c.to), "before", string(c.from)}
	if c.suppressed > 0 {
		attrs = append(attrs, "changes_not_logged", c.suppressed)
	}
	if c.to != StateOK {
		attrs = append(attrs, "err", err.Error())
		s.log.Warn("engine metrics: cannot read the engine's metrics, admission goes on without them", attrs...)
		return
	}
	attrs = append(attrs, "engine", r.Engine)
	for _, kv := range [...]struct {
		k string
		v float64
	}{{"kv_usage_ratio", r.KVUsage}, {"kv_tokens", r.KVTokens}, {"kv_capacity_tokens", r.KVCapacity}} {
		if !math.IsNaN(kv.v) { // NaN breaks slog's JSON handler
			attrs = append(attrs, kv.k, kv.v)
		}
	}
	s.log.Info("engine metrics: reading the engine's KV cache", attrs...)
}
