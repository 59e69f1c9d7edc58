package proxy

import (
	"time"

	"github.com/kneecap/kneecap/slo"
)

// Observer receives live measurements of generation requests as they flow.
// The proxy calls it from the goroutine serving the request, on the hot
// path: implementations must be quick, must not block, and must be safe for
// concurrent use (many requests report at once). Arguments are values; an
// observer may keep them.
type Observer interface {
	// FirstChunk is called once per streamed request, when its first chunk
	// that carries output arrives from the engine.
	FirstChunk(FirstChunk)
	// Chunk is called for every later chunk that carries output.
	Chunk(Chunk)
	// Done is called once per generation request when it has ended (also
	// when it was rejected, failed or cancelled), with its judged record.
	Done(slo.Record)
}

// FirstChunk is the observation of a stream's first output chunk.
type FirstChunk struct {
	// At is when the chunk arrived from the engine.
	At time.Time
	// TTFT runs from arrival at the gateway (the client's view); EngineTTFT
	// from forwarding to the engine; QueueWait is the part spent queued.
	TTFT, EngineTTFT, QueueWait time.Duration
	// Running is how many generation requests were running on the engine
	// (forwarded and not yet ended) at that moment, this one included.
	Running int
	// Targets are the request's targets after header overrides.
	Targets slo.Targets
}

// Chunk is the observation of one output chunk after the first.
type Chunk struct {
	// At is when the chunk arrived from the engine.
	At time.Time
	// Gap is the time since the previous output chunk of the same request
	// (one inter-token latency sample, vLLM's ITL; a chunk may carry
	// several tokens).
	Gap time.Duration
	// Running is as in FirstChunk.
	Running int
	// Targets are the request's targets after header overrides.
	Targets slo.Targets
}

// Observers fans observations out to several observers, in order.
type Observers []Observer

var _ Observer = Observers(nil)

// FirstChunk implements Observer.
func (os Observers) FirstChunk(c FirstChunk) {
	for _, o := range os {
		o.FirstChunk(c)
	}
}

// Chunk implements Observer.
func (os Observers) Chunk(c Chunk) {
	for _, o := range os {
		o.Chunk(c)
	}
}

// Done implements Observer.
func (os Observers) Done(r slo.Record) {
	for _, o := range os {
		o.Done(r)
	}
}

// nopObserver stands in for a nil Config.Observer.
type nopObserver struct{}

func (nopObserver) FirstChunk(FirstChunk) {}
func (nopObserver) Chunk(Chunk)           {}
func (nopObserver) Done(slo.Record)       {}
