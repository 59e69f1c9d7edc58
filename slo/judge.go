package slo

import "time"

// Judge returns the outcome of a request that the engine answered in full,
// from its measurements and r.Targets. Failures (rejected, engine error,
// client cancelled, invalid) are set by the caller and are not judged.
//
// Streamed requests are judged on every target that is set: TTFT (the
// client's), TPOT when defined (two or more output tokens), and E2E. A
// stream that produced no output at all is judged with TTFT = E2E: the
// client waited that long for a first token that never came.
//
// Requests the client did not stream are judged as the client felt them:
// by E2E alone (arrival to the end of the answer), against the E2E target
// when it is set, and otherwise against the bound the other targets imply,
// TTFT + TPOT x (output_tokens - 1): the E2E of a stream of that length
// that met both; a miss is reported as MissedE2E. This holds also for a
// reassembled request, whose TTFT and TPOT were measured (they teach the
// controller; they are not its verdict). See Targets.Verdict.
func Judge(r *Record) Outcome {
	t := r.Targets
	var o Outcome
	if !r.Streamed {
		bound := t.E2E
		if bound == 0 && t.TTFT > 0 {
			bound = t.TTFT
			if t.TPOT > 0 && r.OutputTokens > 1 {
				bound += t.TPOT * time.Duration(r.OutputTokens-1)
			}
		}
		if bound > 0 && r.E2E > bound {
			o |= MissedE2E
		}
		return o
	}
	ttft := r.TTFT
	if r.OutputChunks == 0 {
		ttft = r.E2E
	}
	if t.TTFT > 0 && ttft > t.TTFT {
		o |= MissedTTFT
	}
	if tpot, ok := r.TPOT(); ok && t.TPOT > 0 && tpot > t.TPOT {
		o |= MissedTPOT
	}
	if t.E2E > 0 && r.E2E > t.E2E {
		o |= MissedE2E
	}
	return o
}
