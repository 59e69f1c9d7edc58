package proxy

import (
	"math"
	"sync"

	"github.com/kneecap/kneecap/wire"
)

// Before the engine answers, a request's prompt tokens are estimated from
// its body: the token IDs it gives count as they are, and its text
// (wire.MeasurePrompt's Chars) at a rate learned per route and model from
// the engines' usage reports,
//
//	tokens = IDs + c0 + k x chars,
//
// fitted by least squares over the recent requests (each weighs
// estimateDecay of the one after it), so a chat template's fixed tokens
// (c0) and the tokenizer's characters per token (k) are the engine's own.
// Until a route and model have a fit, the route's fit over every model
// stands in, and before any, defaultTokensPerChar with no intercept.
type estimator struct {
	mu   sync.Mutex
	fits map[estimateKey]*tokenFit
}

type estimateKey struct{ route, model string }

// tokenFit is the decayed least-squares fit of usage tokens against chars.
type tokenFit struct{ w, sx, sy, sxx, sxy float64 }

const (
	// defaultTokensPerChar is the rate before anything was learnt: about
	// four characters a token, English text on the common BPE tokenizers.
	defaultTokensPerChar = 0.25
	// estimateDecay is the weight of a usage report relative to the next
	// one (a memory of about 50 requests).
	estimateDecay = 0.98
	// maxEstimateModels bounds the route-and-model fits kept: the model is
	// a client's string. Beyond it a new model uses its route's fit.
	maxEstimateModels = 64
)

func newEstimator() *estimator {
	return &estimator{fits: map[estimateKey]*tokenFit{}}
}

// estimate returns the estimated prompt tokens of a request of route and
// model whose prompt measured m.
func (e *estimator) estimate(route, model string, m wire.PromptSize) int {
	c0, k := 0.0, defaultTokensPerChar
	e.mu.Lock()
	if f := e.fits[estimateKey{route, model}]; f != nil && f.w >= 1 {
		c0, k = f.line()
	} else if f := e.fits[estimateKey{route, ""}]; f != nil && f.w >= 1 {
		c0, k = f.line()
	}
	e.mu.Unlock()
	est := float64(m.Tokens) + c0 + k*float64(m.Chars)
	if !(est > 0) {
		return max(m.Tokens, 1)
	}
	return int(math.Min(est, math.MaxInt32) + 0.5)
}

// MaxPrefixBlocks bounds a record's prefix fingerprint (Config.
// PrefixBlockTokens): 256 blocks of 512 tokens cover a 128k context.
const MaxPrefixBlocks = 256

// blockChars returns the characters of prompt text that make tokens
// tokens at the estimate's rate before it has learnt anything
// (defaultTokensPerChar). It is fixed on purpose: a fingerprint cut at a
// learnt rate would cut the same text at other places as the fit moves,
// and two requests sharing a prefix would no longer share its hashes.
func blockChars(tokens int) int {
	return max(int(float64(tokens)/defaultTokensPerChar+0.5), 1)
}

// learn fits the engine's count of prompt tokens (its usage report) of a
// request whose prompt measured m. A measure of the whole body (an odd
// body) teaches nothing of the prompt's fields.
func (e *estimator) learn(route, model string, m wire.PromptSize, tokens int) {
	if tokens <= 0 || m.Whole {
		return
	}
	x, y := float64(m.Chars), float64(tokens-m.Tokens)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fit(estimateKey{route, ""}).add(x, y)
	if f := e.fits[estimateKey{route, model}]; f != nil || len(e.fits) < maxEstimateModels {
		e.fit(estimateKey{route, model}).add(x, y)
	}
}

func (e *estimator) fit(k estimateKey) *tokenFit {
	f := e.fits[k]
	if f == nil {
		f = &tokenFit{}
		e.fits[k] = f
	}
	return f
}

func (f *tokenFit) add(x, y float64) {
	f.w = estimateDecay*f.w + 1
	f.sx = estimateDecay*f.sx + x
	f.sy = estimateDecay*f.sy + y
	f.sxx = estimateDecay*f.sxx + x*x
	f.sxy = estimateDecay*f.sxy + x*y
}

// line returns the fitted intercept and slope: least squares where the
// lengths varied enough to tell them apart, else the ratio through the
// origin (one length seen: every token counted per character), never a
// negative slope or intercept.
func (f *tokenFit) line() (c0, k float64) {
	den := f.w*f.sxx - f.sx*f.sx
	if f.w >= 3 && den > 1e-9*f.w*f.sxx {
		k = (f.w*f.sxy - f.sx*f.sy) / den
		c0 = (f.sy - k*f.sx) / f.w
		if k >= 0 && c0 >= 0 {
			return c0, k
		}
	}
	if f.sx > 0 {
		return 0, math.Max(f.sy/f.sx, 0)
	}
	return math.Max(f.sy/f.w, 0), defaultTokensPerChar // no text: the IDs and the template
}
