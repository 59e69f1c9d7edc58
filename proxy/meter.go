package proxy

import (
	"time"

	"github.com/kneecap/kneecap/wire"
)

// outputMeter measures the output chunks of one stream from the engine,
// relayed (relayStream) or reassembled (relayAssembled) alike: the first
// gives TTFT, each later one an ITL gap, each the number of requests
// running when it arrived. What it measured waits in it (the first chunk)
// and in the exchange's chunk queue (the later ones) until observe tells
// the observers.
type outputMeter struct {
	first, last time.Time
	runningSum  int // over output chunks, for rec.MeanRunning
	// generated counts the output chunks the ticket has not been told of
	// yet (Ticket.Generated): it is told once per flush, before the
	// observers, so that the controller reads the same resident KV tokens
	// at each gap as when it was told per chunk.
	generated int
	firstObs  FirstChunk
	haveFirst bool // firstObs waits to be observed
}

// output measures an output chunk that arrived at now. The first stops
// the first-token timer, arms the idle watch and waits in m to be
// observed; a later one waits in x.chunks. A request with several choices
// reports neither (its chunks interleave them). The caller tells the
// ticket of the first (prefill pacing), and observe tells the observers:
// relayStream once the chunk is flushed, relayAssembled at once. It
// reports whether the chunk was the first.
func (p *Proxy) output(x *exchange, m *outputMeter, now time.Time, timer *time.Timer) (first bool) {
	rec := &x.rec
	rec.OutputChunks++
	m.generated++ // resident in the engine's KV cache: the step budget
	running := int(p.running.Load())
	m.runningSum += running
	report := rec.Choices == 0
	if m.first.IsZero() {
		m.first, m.last = now, now
		if timer != nil {
			timer.Stop()
		}
		x.idle.arm()
		rec.TTFT, rec.EngineTTFT = now.Sub(rec.Arrival), now.Sub(x.forwarded)
		if report {
			m.firstObs = FirstChunk{At: now, TTFT: rec.TTFT, EngineTTFT: rec.EngineTTFT,
				QueueWait: rec.QueueWait, Running: running, Targets: rec.Targets}
			m.haveFirst = true
		}
		return true
	}
	gap := now.Sub(m.last)
	m.last = now
	rec.MaxITL = max(rec.MaxITL, gap)
	if report {
		x.chunks.add(p, Chunk{At: now, Gap: gap, Running: running, Targets: rec.Targets})
	}
	return false
}

// observe tells the ticket of the output since the last call, then the
// observers of what waits for them: the first chunk, and the later chunks
// not yet told (the observers of batches once the queue is full).
func (p *Proxy) observe(x *exchange, m *outputMeter) {
	if m.generated > 0 {
		x.ticket.Generated(m.generated)
		m.generated = 0
	}
	if m.haveFirst {
		p.obs.FirstChunk(m.firstObs)
		m.haveFirst = false
	}
	q := &x.chunks
	if q.told < q.n {
		p.fan.flushed(q.c[q.told:q.n])
		q.told = q.n
	}
	if q.n == len(q.c) {
		p.fan.batch(q.c[:q.n])
		q.n, q.told = 0, 0
	}
}

// observeEnd tells every observer what the stream left waiting, when it
// has ended.
func (p *Proxy) observeEnd(x *exchange, m *outputMeter) {
	p.observe(x, m)
	q := &x.chunks
	if q.n > 0 {
		p.fan.batch(q.c[:q.n])
		q.n, q.told = 0, 0
	}
}

// chunkQueue holds a stream's later output chunks from their arrival
// until every observer has had them: until they are flushed to the client
// (then the observers of each chunk and of each flush get them), and then
// until the queue is full or the stream ends (then the observers of
// batches, GapObserver, get them in one call). It lives in the exchange,
// so that a request allocates nothing for it.
type chunkQueue struct {
	c       [maxPendingObs]Chunk
	n, told int // chunks held; of them, the first told have been flushed and told
}

// waiting is how many chunks wait for a flush to the client.
func (q *chunkQueue) waiting() int { return q.n - q.told }

// add queues c. A full queue first hands the chunks already told to the
// observers of batches and keeps the rest (relayStream flushes before
// maxPendingObs chunks wait, so some have been told).
func (q *chunkQueue) add(p *Proxy, c Chunk) {
	if q.n == len(q.c) {
		p.fan.batch(q.c[:q.told])
		q.n = copy(q.c[:], q.c[q.told:q.n])
		q.told = 0
	}
	q.c[q.n] = c
	q.n++
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
		rec.CachedPromptTokens = usage.CachedTokens
	} else {
		rec.OutputTokens, rec.Estimated = rec.OutputChunks, true
	}
}
