package control

import (
	"testing"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
)

// The token model learns prefill from the part of each prompt the engine
// prefilled: with prompts 90 % cached and an engine TTFT of 1 ms per
// uncached token (and a decode step), the per-token cost comes out near 1 ms, where learning
// from whole prompts (NoCachedCost) makes it about a tenth of that, and
// the mean prompt is what admission charged.
func TestLoopLearnsUncachedPrefill(t *testing.T) {
	for _, off := range []bool{false, true} {
		r, err := NewLoop(LoopConfig{
			Controller: ControllerConfig{MaxCap: 64, InitialCap: 8, NoCachedCost: off},
			Limiter:    admission.NewLimiter(admission.Config{Limit: 8}),
		})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		for i := range 200 {
			prompt := 1000 + 50*(i%20)
			cached := prompt * 9 / 10
			step := time.Duration(5+i%7) * time.Millisecond
			ttft := time.Duration(prompt-cached)*time.Millisecond + step
			now = now.Add(50 * time.Millisecond)
			r.Finished(now, slo.Record{
				Arrival: now.Add(-time.Second), EngineTTFT: ttft, TTFT: ttft, E2E: ttft + 100*time.Millisecond,
				OutputTokens: 10, PromptTokens: prompt, CachedPromptTokens: cached,
				PromptEstimate: prompt, PromptCharged: prompt - cached, PrefillStep: step,
			}, 1)
		}
		r.lock()
		r.c.tok.refit(now)
		per, mean := r.c.tok.prefill.c[2], r.c.tok.prompt.mean()
		r.mu.Unlock()
		if off {
			if per > 0.2e-3 || mean < 1000 {
				t.Errorf("NoCachedCost: %.3g s per token, mean prompt %.0f, want about 1e-4 and the whole prompts", per, mean)
			}
			continue
		}
		if per < 0.8e-3 || per > 1.2e-3 || mean > 200 {
			t.Errorf("cached cost: %.3g s per token, mean prompt %.0f, want about 1e-3 and about 147", per, mean)
		}
	}
}
