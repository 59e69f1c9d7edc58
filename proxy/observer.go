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

// ChunksObserver is an Observer that takes the later chunks of one flush
// to the client in one call (Chunks) instead of a Chunk call each: the
// same chunks, at the same moment and in the same order (the gateway's
// controller takes its lock once for them). The proxy calls Chunks, never
// Chunk. The slice is the proxy's: an implementation must not keep it.
type ChunksObserver interface {
	Observer
	Chunks([]Chunk)
}

// GapObserver is an Observer that takes a stream's later chunks in
// batches (Gaps) instead of a Chunk call each: for an aggregate (a
// histogram or a sketch of ITL) that needs every gap but not the moment
// it came. The proxy calls Gaps, never Chunk, with chunks already flushed
// to the client, in order, each once: when its queue of a stream's chunks
// is full (maxPendingObs of them), and at the end of the stream, before
// Done. The slice is the proxy's: an implementation must not keep it.
type GapObserver interface {
	Observer
	Gaps([]Chunk)
}

// fanout is Config.Observer split by how each observer takes later
// chunks: one at a time (Chunk), one flush at a time (ChunksObserver) or
// in batches (GapObserver). FirstChunk and Done go to Config.Observer as
// it is.
type fanout struct {
	each   []Observer
	chunks []ChunksObserver
	gaps   []GapObserver
}

// newFanout splits o, flattening Observers.
func newFanout(o Observer) fanout {
	var f fanout
	var add func(Observer)
	add = func(o Observer) {
		switch o := o.(type) {
		case nil, nopObserver:
		case Observers:
			for _, m := range o {
				add(m)
			}
		case GapObserver:
			f.gaps = append(f.gaps, o)
		case ChunksObserver:
			f.chunks = append(f.chunks, o)
		default:
			f.each = append(f.each, o)
		}
	}
	add(o)
	return f
}

// flushed tells the observers of each chunk and of each flush of cs.
func (f *fanout) flushed(cs []Chunk) {
	for _, o := range f.each {
		for _, c := range cs {
			o.Chunk(c)
		}
	}
	for _, o := range f.chunks {
		o.Chunks(cs)
	}
}

// batch tells the observers of batches of cs.
func (f *fanout) batch(cs []Chunk) {
	for _, o := range f.gaps {
		o.Gaps(cs)
	}
}

// Observers fans observations out to several observers, in order. Given
// as Config.Observer, each member takes later chunks its own way (Chunk,
// ChunksObserver or GapObserver).
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
