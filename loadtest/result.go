package loadtest

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/kneecap/kneecap/bench"
)

// Result is what one run measured. Counts and rates are over the measured
// window (requests that ended in it); Problems over the whole run.
type Result struct {
	Stack   Stack  `json:"engine"`
	Mode    string `json:"mode"`
	Clients string `json:"clients"`
	Cap     int    `json:"static_cap,omitempty"`

	WindowSeconds float64 `json:"window_seconds"`
	// Goodput and Served are good and completed requests per second;
	// Refusals the 429s the users got (every attempt), per second too in
	// RefusalsPerSecond; Failed the requests their clients gave up
	// (bench's GaveUp: refused on the SDKs' last try); Errors the
	// requests that ended in neither an answer nor a refusal.
	Goodput           float64 `json:"good_rps"`
	Served            float64 `json:"served_rps"`
	Good              int     `json:"good"`
	Completed         int     `json:"completed"`
	Refusals          int     `json:"refusals"`
	RefusalsPerSecond float64 `json:"refusals_per_second"`
	Failed            int     `json:"failed"`
	Errors            int     `json:"errors"`
	// MedianTTFT and MedianTPOT are of the completed requests, in
	// milliseconds, TTFT as the client felt it.
	MedianTTFT float64 `json:"median_ttft_ms"`
	MedianTPOT float64 `json:"median_tpot_ms"`
	// MedianRetryAfter is the median Retry-After of the refusals, in
	// seconds.
	MedianRetryAfter float64 `json:"median_retry_after_s"`

	// The gateway's side (absent for the engine alone). FinalCap is its
	// cap when the window ended; MeanRunning the requests it had running
	// on the engine, on average over the window; IdleSlots its slot time
	// left idle while demand waited (queued, or refused and expected
	// back) per second of the window: the mean number of slots so idle.
	// Returned, RefusedAgain and GaveUp are its counts over the window of
	// refused requests that came back (the same body), of their refusals,
	// and of refusals on a client's last try (admission.OutsideStats).
	FinalCap     int     `json:"final_cap,omitempty"`
	MeanRunning  float64 `json:"mean_running,omitempty"`
	IdleSlots    float64 `json:"idle_slots"`
	Returned     int64   `json:"returned"`
	RefusedAgain int64   `json:"refused_again"`
	GaveUp       int64   `json:"gateway_gave_up"`

	// Problems are the checks that failed: a request lost or broken, the
	// gateway's counts missing or inconsistent.
	Problems []string `json:"problems,omitempty"`
	Wall     string   `json:"wall"`
}

func (r *Result) problem(format string, a ...any) {
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// measure takes the users' side of the level, and checks that no request
// was lost or broken: each one completed, or was refused with a 429 and a
// Retry-After (retried, or given up by its client), or was still running
// when the level ended.
func (r *Result) measure(lv bench.Level) {
	s := lv.Summary
	r.WindowSeconds = s.Duration.Seconds()
	r.Good, r.Completed, r.Refusals, r.Failed = s.Good, s.Completed, s.Rejected, s.GaveUp
	r.Errors = s.Failed
	r.Goodput, r.Served = s.Goodput, s.RequestThroughput
	if r.WindowSeconds > 0 {
		r.RefusalsPerSecond = float64(s.Rejected) / r.WindowSeconds
	}
	r.MedianTTFT, r.MedianTPOT = ms(s.TTFT.P50), ms(s.TPOT.P50)
	var waits []time.Duration
	for _, rec := range bench.Slice(lv.Records, lv.WindowStart, lv.WindowEnd) {
		if rec.Outcome == bench.Rejected {
			waits = append(waits, rec.RetryAfter)
		}
	}
	if len(waits) > 0 {
		slices.Sort(waits)
		r.MedianRetryAfter = waits[len(waits)/2].Seconds()
	}
	for _, rec := range lv.Records {
		switch {
		case rec.Outcome == bench.Completed, rec.Outcome == bench.Unfinished:
		case rec.Outcome == bench.Rejected && rec.Status == http.StatusTooManyRequests && rec.RetryAfter > 0:
		default:
			r.problem("a request %s: status %d, Retry-After %v, reason %q: %s", rec.Outcome, rec.Status, rec.RetryAfter, rec.Reason, rec.Err)
		}
	}
	if r.Completed == 0 {
		r.problem("no request completed in the window")
	}
}

// gateway takes the gateway's side from its samples (the last one taken
// after the window ended), and checks what holds whatever the
// controller's tuning: the idle slot time only grows and fits in the
// slots; the users' retries are the gateway's returns, and their last
// tries its gave-ups; users that send a new request after a refusal are
// never seen coming back; a static cap stays put.
func (r *Result) gateway(lv bench.Level, c Case, samples []sample) {
	if len(samples) == 0 {
		r.problem("no sample of the gateway")
		return
	}
	from, to := lv.WindowStart, lv.WindowEnd
	a, b := samples[0], samples[len(samples)-1]
	var running, n int
	for i, s := range samples {
		if !s.at.After(from) {
			a = s
		}
		if !s.at.Before(to) && b.at.After(s.at) {
			b = s
		}
		if s.at.After(from) && s.at.Before(to) {
			running += s.running
			n++
		}
		if i > 0 && s.outside.IdleSlotTime < samples[i-1].outside.IdleSlotTime {
			r.problem("idle slot time went down: %v then %v", samples[i-1].outside.IdleSlotTime, s.outside.IdleSlotTime)
		}
		if c.Mode.Cap > 0 && s.limit != c.Mode.Cap {
			r.problem("static cap %d read %d", c.Mode.Cap, s.limit)
		}
	}
	if n > 0 {
		r.MeanRunning = float64(running) / float64(n)
	}
	r.FinalCap = b.limit
	window := to.Sub(from)
	if window > 0 {
		r.IdleSlots = (b.outside.IdleSlotTime - a.outside.IdleSlotTime).Seconds() / window.Seconds()
	}
	r.Returned = b.outside.Returned - a.outside.Returned
	r.RefusedAgain = b.outside.RefusedAgain - a.outside.RefusedAgain
	r.GaveUp = b.outside.GaveUp - a.outside.GaveUp

	// Over the whole run: what the users did, against what the gateway
	// counted (the last sample is after every user stopped).
	total := samples[len(samples)-1].outside
	var retries, lastTries, cut int64
	for _, rec := range lv.Records {
		if rec.Attempt > 0 {
			retries++
		}
		if rec.Outcome == bench.Rejected && rec.Attempt == bench.SDKMaxRetries {
			lastTries++
		}
		if rec.Outcome == bench.Unfinished {
			cut++
		}
	}
	switch c.Clients.Clients {
	case bench.ClientsSDK:
		// A retry is the same body again: each one that came after a
		// refusal is a return. Requests cut off at the end may have been
		// refused without the user seeing it.
		if retries > 0 && total.Returned == 0 {
			r.problem("the SDK users retried %d times and the gateway saw no return", retries)
		}
		if total.Returned > retries {
			r.problem("the gateway counted %d returns of %d retries", total.Returned, retries)
		}
		if total.GaveUp < lastTries || total.GaveUp > lastTries+cut {
			r.problem("the gateway counted %d refusals on a last try; the users got %d (%d requests cut off)", total.GaveUp, lastTries, cut)
		}
	case bench.ClientsNext:
		// A new request each time: nothing comes back, nobody gives up.
		if total.Returned != 0 || total.GaveUp != 0 {
			r.problem("users that never resend were counted %d returns and %d gave-ups", total.Returned, total.GaveUp)
		}
	}
}
