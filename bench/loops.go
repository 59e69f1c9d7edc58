package bench

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// minPause is how long a closed-loop user waits after a rejection or a
// failure when it does not honour Retry-After (or none was given), so that a
// server answering errors at once is not flooded in a tight loop.
const minPause = 10 * time.Millisecond

// user is one closed-loop user: it sends its next request when the previous
// one ended, until the level ends. What it does with a refused or failed
// request is Config.Clients'.
func (r *levelRun) user(ctx context.Context, u int) {
	rng := r.rng(u)
	// The SDKs' jitter draws from a source of its own, so that every
	// mode's users send the same requests in the same order.
	jitter := r.rng(u + 1<<20)
	if ramp := r.cfg.RampUp; ramp > 0 && !sleep(ctx, ramp*time.Duration(u)/time.Duration(r.value)) {
		return
	}
	for seq := 0; ctx.Err() == nil; seq++ {
		req := r.cfg.Workload.Next(Slot{Level: r.index, User: u, Seq: seq, Elapsed: time.Since(r.start), Rand: rng})
		if req.Idle > 0 {
			if !sleep(ctx, req.Idle) {
				return
			}
			continue
		}
		for attempt := 0; ctx.Err() == nil; attempt++ {
			pause, again := r.attempt(ctx, u, req, attempt, jitter)
			if !sleep(ctx, pause) {
				return
			}
			if !again {
				break
			}
		}
	}
}

// attempt sends one attempt of req, records it, and says how long the user
// pauses and whether it sends req again (Config.Clients).
func (r *levelRun) attempt(ctx context.Context, u int, req Request, attempt int, jitter *rand.Rand) (pause time.Duration, again bool) {
	sent := req
	if r.cfg.Clients == ClientsSDK {
		sent.Header = req.Header.Clone()
		if sent.Header == nil {
			sent.Header = http.Header{}
		}
		sent.Header.Set("X-Stainless-Retry-Count", strconv.Itoa(attempt))
	}
	rec := r.cfg.send(ctx, r.client, r.url, sent, time.Now())
	rec.User, rec.Attempt = u, attempt
	if rec.Outcome == Completed || rec.Outcome == Unfinished {
		r.add(withTargets(rec, req))
		return r.cfg.Think, false
	}
	pause = minPause
	switch r.cfg.Clients {
	case ClientsSDK:
		if sdkRetries(rec) && attempt < SDKMaxRetries {
			pause, again = sdkDelay(rec, attempt, jitter), true
		} else {
			rec.GaveUp = true
		}
	case ClientsNone:
		rec.GaveUp = true
	default:
		if r.cfg.RetryAfterMax > 0 && rec.RetryAfter > 0 {
			pause = max(pause, min(rec.RetryAfter, r.cfg.RetryAfterMax))
		}
	}
	r.add(withTargets(rec, req))
	if r.cfg.RetryThink > 0 {
		pause += r.cfg.RetryThink + time.Duration(u)
	}
	return pause, again
}

// withTargets marks a record to be judged by its request's own targets.
func withTargets(rec Record, req Request) Record {
	if !req.Targets.IsZero() {
		rec.Targets = req.Targets
	}
	return rec
}

// dispatch is the open loop: it schedules arrivals at the level's rate and
// starts one goroutine per request, each measured from when it was due.
func (r *levelRun) dispatch(ctx context.Context, wg *sync.WaitGroup) {
	rng := r.rng(-1)
	slots := make(chan struct{}, r.cfg.MaxInFlight)
	next := r.start
	for seq := 0; ; seq++ {
		gap := r.gap(rng, next.Sub(r.start))
		if gap < 0 {
			if r.cfg.EndWithArrivals {
				r.endWhenIdle(ctx, slots)
			}
			return
		}
		next = next.Add(gap)
		if !sleep(ctx, time.Until(next)) {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		due := next
		req := r.cfg.Workload.Next(Slot{Level: r.index, User: -1, Seq: seq, Elapsed: due.Sub(r.start), Rand: rng})
		wg.Go(func() {
			defer func() { <-slots }()
			r.arrival(ctx, seq, req, due)
		})
	}
}

// endWhenIdle waits until every request in flight has ended (each holds
// one of slots until then) and closes the level's window.
func (r *levelRun) endWhenIdle(ctx context.Context, slots chan struct{}) {
	for range cap(slots) {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
	}
	r.mu.Lock()
	r.closeWindowLocked(time.Now())
	r.mu.Unlock()
}

// arrival sends one open-loop request due at due, and what its client does
// with a refusal or failure (Config.Clients): ClientsSDK retries it as the
// OpenAI SDKs do (each retry measured from when it was sent, as a closed
// loop's), ClientsNone gives up (GaveUp), ClientsNext sends it once.
func (r *levelRun) arrival(ctx context.Context, seq int, req Request, due time.Time) {
	if r.cfg.Clients != ClientsSDK {
		rec := r.cfg.send(ctx, r.client, r.url, req, due)
		if r.cfg.Clients == ClientsNone && (rec.Outcome == Rejected || rec.Outcome == Failed) {
			rec.GaveUp = true
		}
		r.add(withTargets(rec, req))
		return
	}
	var jitter *rand.Rand
	for attempt := 0; ; attempt++ {
		sent := req
		sent.Header = req.Header.Clone()
		if sent.Header == nil {
			sent.Header = http.Header{}
		}
		sent.Header.Set("X-Stainless-Retry-Count", strconv.Itoa(attempt))
		rec := r.cfg.send(ctx, r.client, r.url, sent, due)
		rec.Attempt = attempt
		if rec.Outcome == Completed || rec.Outcome == Unfinished || !sdkRetries(rec) || attempt >= SDKMaxRetries || ctx.Err() != nil {
			rec.GaveUp = rec.Outcome == Rejected || rec.Outcome == Failed
			r.add(withTargets(rec, req))
			return
		}
		r.add(withTargets(rec, req))
		if jitter == nil {
			jitter = r.rng(1<<21 + seq) // apart from the users' and their jitter's sources
		}
		if !sleep(ctx, sdkDelay(rec, attempt, jitter)) {
			return
		}
		due = time.Now()
	}
}

// gap returns the time to the next arrival: Config.Interarrival when set,
// else constant spacing or gamma-distributed gaps with shape Burstiness and
// mean 1/rate (exponential, so Poisson arrivals, at burstiness 1), as vLLM.
func (r *levelRun) gap(rng *rand.Rand, elapsed time.Duration) time.Duration {
	rate := r.value
	if r.cfg.Interarrival != nil {
		return r.cfg.Interarrival(rng, rate, elapsed)
	}
	mean := 1 / rate
	if r.cfg.Constant {
		return seconds(mean)
	}
	k := r.cfg.Burstiness
	if k == 0 || k == 1 {
		return seconds(rng.ExpFloat64() * mean)
	}
	return seconds(gamma(rng, k) * mean / k)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// gamma draws from Gamma(k, 1) by Marsaglia and Tsang's method (with the
// boost for k < 1).
func gamma(rng *rand.Rand, k float64) float64 {
	if k < 1 {
		return gamma(rng, k+1) * math.Pow(rng.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
