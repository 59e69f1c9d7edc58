package control

import (
	"time"
)

// Observe: what one decision notes of the interval since the previous
// one (see tick.go): the time the cap held under demand and the good
// completions then (noteDwell), the running count and whether there was
// demand (noteLoad), a tenant held short or bounded (noteShort), what the
// ramp cost (noteRamp); the slot time left idle is noted in
// observeDemand. Then what the moves read of it: lightLoad, tenantShort,
// tenantBounded. What the controller is told between decisions (chunks,
// first tokens, finished requests, the engine's metrics) is in
// controller_observe.go.

// noteDwell credits the time since the last decision to the cap held, if
// there was demand (queued, refused, or running at the cap), and
// counts good completions to the cap that saw them end. Both decay with
// the model's memory: a level measured a while ago still informs the
// choice, but less.
func (c *Controller) noteDwell(now time.Time, load Load) {
	if !c.lastDwell.IsZero() {
		if dt := now.Sub(c.lastDwell).Seconds(); dt > 0 && dt < 10 {
			tau := c.cfg.Memory
			for n, d := range c.dwell {
				if d.decay(now, tau); d.w < 1e-3 {
					delete(c.dwell, n)
				}
			}
			// Only time with demand measures what the level can serve: a
			// level idling under light load would read as a poor one.
			if load.PeakQueued > 0 || load.Rejected > 0 || load.PeakRunning >= c.cap {
				l := c.dwell.at(c.cap)
				l.decay(now, tau)
				l.w += dt
				l.sum += float64(c.goodSince)
			}
		}
	}
	c.lastDwell, c.goodSince = now, 0
}

// noteLoad records the running count and whether there was demand
// (requests queued or refused, or the engine within max(1, cap/8) of the
// cap) for lightLoad, and returns the latter.
func (c *Controller) noteLoad(now time.Time, load Load) bool {
	demand := load.PeakQueued > 0 || load.Rejected > 0 ||
		load.PeakRunning >= c.cap-max(1, c.cap/8)
	if load.PeakRunning >= c.peakRun || now.Sub(c.peakRunAt) >= peakMemory {
		c.peakRun, c.peakRunAt = load.PeakRunning, now
	}
	if load.StepHeld {
		c.stepHeldAt = now
	}
	c.busy.add(now, c.cfg.Memory, float64(load.Running))
	c.pressure.add(now, c.cfg.Memory, indicator(demand))
	return demand
}

// indicator is 1 for true and 0 for false.
func indicator(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// noteShort keeps the shares of decisions that saw a short tenant, and a
// bounded or short one.
func (c *Controller) noteShort(now time.Time, load Load) {
	c.boundedNow = load.BoundedTenant || load.ShortTenant
	c.short.add(now, shortMemory, one(load.ShortTenant))
	c.bounded.add(now, shortMemory, one(c.boundedNow))
}

// one is 1 for true, 0 for false: a sample of a share.
func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// noteRamp counts what a decision saw while the ramp ran.
func (c *Controller) noteRamp(now time.Time, load Load, interval time.Duration) {
	if !c.ramp.on {
		return
	}
	if c.ramp.since.IsZero() {
		c.ramp.since = now
	}
	c.ramp.refused += load.Rejected
	if load.PeakQueued > 0 || load.Rejected > 0 {
		c.ramp.idle += float64(max(c.cap-load.Running, 0)) * interval.Seconds()
	}
}

// lightLoad reports whether the engine runs at most n requests on average
// and met demand (requests queued or refused, or the engine at the cap) in
// at most a tenth of the last minute's decisions: the load is light, and
// requests that come at once are a rare burst, not the on phase of a
// recurring overload.
func (c *Controller) lightLoad(n float64) bool {
	return c.busy.w > 0 && c.busy.mean() <= n && c.pressure.mean() <= lightPressure
}

// tenantShort reports whether most recent decisions saw a tenant held
// below its share by its own demand.
func (c *Controller) tenantShort() bool {
	return c.short.w > 0 && c.short.sum >= 0.5*c.short.w
}

// tenantBounded reports whether the last decision, or most recent ones,
// saw a tenant bounded by its own demand (Load.BoundedTenant) or short.
func (c *Controller) tenantBounded() bool {
	return c.boundedNow || (c.bounded.w > 0 && c.bounded.sum >= 0.5*c.bounded.w) || c.tenantShort()
}
