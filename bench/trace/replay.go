package trace

import (
	"math/rand/v2"
	"strings"
	"time"

	"github.com/kneecap/kneecap/bench"
)

// BlockTokens is the tokens a prefix block id stands for: Mooncake's
// traces hash prompts in blocks of 512 tokens, and so does the request
// log.
const BlockTokens = 512

// Prompt returns the prompt of r: for each block id h of r.Blocks, block
// words drawn deterministically from h (so every request that names h
// shares that text), up to r.Prompt words, the last block cut short; words
// beyond the ids are drawn from the request's own line, shared with no
// other request. The simulator counts one token a word.
func Prompt(r Request, block int) string {
	if block <= 0 {
		block = BlockTokens
	}
	var b strings.Builder
	b.Grow(r.Prompt * 5)
	left := r.Prompt
	for i := 0; left > 0; i++ {
		id := uint64(1)<<63 | uint64(r.Line)<<24 | uint64(i) // the request's own
		if i < len(r.Blocks) {
			id = r.Blocks[i]
		}
		n := min(left, block)
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(bench.Words(rand.New(rand.NewPCG(id, 0x6b6e6565636170)), n))
		left -= n
	}
	return b.String()
}

// Replay is what bench needs to replay a trace open loop.
type Replay struct {
	Trace *Trace
	// Block is the words a prefix block id becomes (BlockTokens scaled
	// with the lengths); 0 means BlockTokens.
	Block int
}

// Rate is the trace's mean arrival rate (requests a second over its span;
// the count itself for a span of zero), the value its level reports.
func (p *Replay) Rate() float64 {
	span := p.Trace.Span().Seconds()
	if span <= 0 {
		return float64(len(p.Trace.Requests))
	}
	return float64(len(p.Trace.Requests)) / span
}

// Interarrival returns bench.Config.Interarrival for the trace: the gap to
// each request's arrival in turn, then a negative gap (the end). It keeps
// a counter: one level, one dispatcher.
func (p *Replay) Interarrival() func(*rand.Rand, float64, time.Duration) time.Duration {
	i := 0
	return func(_ *rand.Rand, _ float64, elapsed time.Duration) time.Duration {
		if i >= len(p.Trace.Requests) {
			return -1
		}
		gap := max(p.Trace.Requests[i].At-elapsed, 0)
		i++
		return gap
	}
}

// Workload returns the bench.Workload of the trace: request Seq's prompt
// and its output length as max_tokens.
func (p *Replay) Workload() bench.Workload {
	return bench.WorkloadFunc(func(s bench.Slot) bench.Request {
		if s.Seq >= len(p.Trace.Requests) {
			return bench.Request{Prompt: "x", MaxTokens: 1}
		}
		r := p.Trace.Requests[s.Seq]
		return bench.Request{Prompt: Prompt(r, p.Block), MaxTokens: max(r.Output, 1)}
	})
}
