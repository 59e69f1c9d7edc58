package admission

import (
	"slices"
	"time"
)

// The short answers' stall check: a request whose output bound is a few
// tokens (Request.MaxOutput) has its time per output token from a few
// decode steps, and one prefill in any of them puts it past its TPOT
// target. The budget holds a prefill that would do so until the short
// answers it would stall have ended (a few decode steps), as it holds one
// that would make a running request's step too long (stepFits). On
// scenario 31 (Mooncake's multi-turn trace: answers of 2-7 tokens beside
// prompts of 1,000-38,000) 54 short answers missed their TPOT target
// behind a prefill of 1,300 tokens or more.

// shortOutput is the longest output bound (tokens) of a request the stall
// check protects: up to it, one prefill of an ordinary prompt in one of
// its gaps makes its mean gap several times the step. Longer answers
// spread a stall over more tokens; stepFits' StallPerRunning weighs those.
const shortOutput = 16

// shortAnswer reports whether c is one the stall check protects.
func shortAnswer(c candidate) bool {
	return c.output > 1 && c.output <= shortOutput && c.tpot > 0
}

// stallFits reports whether c's prefill, started now, stalls no running
// short answer past its TPOT target: the prefill as the model predicts
// it (the decode step then and its prompt), within the slack of each
// short answer whose decode it would fall in, (output bound - 1) x (TPOT
// target - step). A short answer whose own prefill has not started yet
// (granted less than a step ago) is prefilled with c, not stalled by it;
// one that has made all its tokens is over. The prediction is taken
// without the margin: the margin is the P-quantile of measured over
// predicted TTFT, the arrival's phase within a step and the batch it
// waits for, which a stall does not have. (With it, scenario 31 held
// prompts that would have stalled no one past the target and refused 40
// more by their deadline: 6.608 good req/s against 6.983 without it;
// with the per-token term alone, as stallPer weighs a prefill's stall,
// the steps of a prefill and the cached tokens the engine still reads
// were missed: 32 TPOT misses, 6.408.)
func (b *budget) stallFits(now time.Time, c candidate, running, resident int) bool {
	if !b.costs.knowsPrefill() || len(b.short) == 0 {
		return true
	}
	step := b.costs.Step(running, resident)
	stall := b.costs.prefillMean(c.prompt, step)
	for _, s := range b.short {
		if s.prefilling && now.Sub(s.granted) < step {
			continue
		}
		if int(s.generated.Load()) >= s.outBound {
			continue
		}
		if stall > time.Duration(s.outBound-1)*(s.tpot-step) {
			return false
		}
	}
	return true
}

// takeShort notes a granted short answer.
func (b *budget) takeShort(t *Ticket, c candidate) {
	if shortAnswer(c) {
		t.outBound, t.tpot = c.output, c.tpot
		b.short = append(b.short, t)
	}
}

// releaseShort forgets t.
func (b *budget) releaseShort(t *Ticket) {
	if t.outBound == 0 {
		return
	}
	for i, s := range b.short {
		if s == t {
			b.short = slices.Delete(b.short, i, i+1) // zeroes the tail
			return
		}
	}
}
