package proxy

import (
	"time"

	"github.com/kneecap/kneecap/wire"
)

// outputMeter measures the output chunks of one stream from the engine,
// relayed (relayStream) or reassembled (relayAssembled) alike: the first
// gives TTFT, each later one an ITL gap, each the number of requests
// running when it arrived.
type outputMeter struct {
	first, last time.Time
	runningSum  int // over output chunks, for rec.MeanRunning
}

// output measures an output chunk that arrived at now. The first stops
// the first-token timer and arms the idle watch; the caller tells the
// ticket (prefill pacing): relayStream once the chunk is flushed,
// relayAssembled at once. It returns the observation: a FirstChunk (first)
// or a Chunk, and whether to report it (report: not for a request with
// several choices, whose chunks interleave them).
func (p *Proxy) output(x *exchange, m *outputMeter, now time.Time, timer *time.Timer) (fc FirstChunk, c Chunk, first, report bool) {
	rec := &x.rec
	rec.OutputChunks++
	x.ticket.Generated(1) // resident in the engine's KV cache: the step budget
	running := int(p.running.Load())
	m.runningSum += running
	if m.first.IsZero() {
		m.first, m.last = now, now
		if timer != nil {
			timer.Stop()
		}
		x.idle.arm()
		rec.TTFT, rec.EngineTTFT = now.Sub(rec.Arrival), now.Sub(x.forwarded)
		return FirstChunk{At: now, TTFT: rec.TTFT, EngineTTFT: rec.EngineTTFT,
			QueueWait: rec.QueueWait, Running: running, Targets: rec.Targets}, Chunk{}, true, rec.Choices == 0
	}
	gap := now.Sub(m.last)
	m.last = now
	rec.MaxITL = max(rec.MaxITL, gap)
	return FirstChunk{}, Chunk{At: now, Gap: gap, Running: running, Targets: rec.Targets}, false, rec.Choices == 0
}

// settle sets the record's mean running count and its output tokens: the
// usage report's (per choice) when there was one (have), or else the
// output chunks (estimated).
func (m *outputMeter) settle(x *exchange, usage wire.Usage, have bool) {
	rec := &x.rec
	if rec.OutputChunks > 0 {
		rec.MeanRunning = float64(m.runningSum) / float64(rec.OutputChunks)
	}
	if have {
		rec.PromptTokens, rec.OutputTokens = usage.PromptTokens, perChoice(usage.CompletionTokens, rec.Choices)
	} else {
		rec.OutputTokens, rec.Estimated = rec.OutputChunks, true
	}
}
