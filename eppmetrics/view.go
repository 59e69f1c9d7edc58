package eppmetrics

import (
	"math"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/enginemetrics"
)

// DefaultSaturatedWaiting is Config.SaturatedWaiting's usual value: the
// endpoint picker's default queue-depth threshold (its utilization
// detector's queueDepthThreshold), so that a refusing pod reads as full to
// a picker left at its defaults.
const DefaultSaturatedWaiting = 5

// Config says what a View reads.
type Config struct {
	// Limiter is the gateway's: its queue, its running requests and the
	// refused requests it expects back. Required.
	Limiter *admission.Limiter
	// Engine reads the engine's own metrics; nil (scraping off) means the
	// engine's waiting requests, KV usage and LoRA adapters are unknown.
	Engine *enginemetrics.Scraper
	// SaturatedWaiting is the least Waiting reported while the pod is
	// saturated (refusing, or draining); 0 means no floor.
	SaturatedWaiting int
	// MaxQueue is the limiter's queue bound (the gateway's
	// KNEECAP_MAX_QUEUE): with every slot held and this many queued, the
	// next request is refused before it is read, so the pod is saturated.
	MaxQueue int
}

// View computes the pod's numbers as the endpoint picker reads them, from
// the limiter and the engine's latest reading, when asked (at scrape time:
// nothing here runs per request). It is safe for concurrent use.
type View struct{ cfg Config }

// New returns a View of cfg.
func New(cfg Config) *View { return &View{cfg: cfg} }

// Numbers is one reading of the pod in the model-server protocol's terms.
type Numbers struct {
	// Waiting is the requests the pod holds that no engine slot serves
	// yet: those in kneecap's queue, those in the engine's own queue
	// (granted by kneecap past the engine's limit), and the requests
	// kneecap refused and expects back (told a Retry-After that has not
	// passed); at least SaturatedWaiting while Saturated.
	Waiting int
	// Running is the requests the engine runs: those holding a kneecap
	// slot (every request reaches the engine through kneecap, and a slot
	// is held until the stream ends), less the engine's own waiting,
	// which kneecap granted past the engine's limit. Kneecap's count is
	// exact at the instant of the scrape; the engine's lags its scrape.
	Running int
	// Saturated is true while kneecap refuses requests (refused requests
	// are expected back, or every slot is held and the queue is full, so
	// that the next request is refused) or drains: the pod is full, not
	// broken.
	Saturated bool
	// Queued, EngineWaiting and Away are Waiting's parts (EngineWaiting 0
	// when unknown), before the floor.
	Queued, EngineWaiting, Away int
	// Engine is the engine's latest reading and Fresh whether it is
	// fresh (KV usage, LoRA adapters and cache geometry come from it).
	Engine enginemetrics.Reading
	Fresh  bool
}

// KVUsage is the engine's KV-cache usage, 0 to 1, and whether it is known
// (a fresh reading that has it).
func (n Numbers) KVUsage() (float64, bool) {
	return n.Engine.KVUsage, n.Fresh && !math.IsNaN(n.Engine.KVUsage)
}

// LoRA is the engine's LoRA adapters (vLLM), nil when unknown.
func (n Numbers) LoRA() *enginemetrics.LoRA {
	if !n.Fresh {
		return nil
	}
	return n.Engine.LoRA
}

// Read takes the numbers now.
func (v *View) Read() Numbers {
	st := v.cfg.Limiter.State()
	out := v.cfg.Limiter.Outside()
	r, fresh := v.cfg.Engine.Latest()
	n := Numbers{Queued: st.Queued, Away: out.Away, Engine: r, Fresh: fresh}
	if fresh && !math.IsNaN(r.Waiting) {
		n.EngineWaiting = int(math.Round(r.Waiting))
	}
	n.Running = max(st.Running-n.EngineWaiting, 0)
	n.Waiting = n.Queued + n.EngineWaiting + n.Away
	full := st.Running >= st.Limit && st.Queued >= v.cfg.MaxQueue
	n.Saturated = n.Away > 0 || full || st.Draining
	if n.Saturated {
		n.Waiting = max(n.Waiting, v.cfg.SaturatedWaiting)
	}
	return n
}

// Geometry is the engine's KV-cache block size and block count (vLLM),
// when a fresh reading has them.
func (n Numbers) Geometry() (blockSize, blocks int, ok bool) {
	if !n.Fresh || math.IsNaN(n.Engine.BlockSize) || math.IsNaN(n.Engine.Blocks) {
		return 0, 0, false
	}
	return int(n.Engine.BlockSize), int(n.Engine.Blocks), true
}
