package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// Workload chooses what each request sends. It is the hook for workloads that
// change during a run (the prompt length doubling halfway, a share of requests
// carrying tighter targets): Next sees the time since the level started.
//
// Next may be called from several goroutines at once; each caller passes its
// own seeded Rand, so an implementation that draws only from s.Rand needs no
// lock and gives a repeatable run.
type Workload interface {
	Next(s Slot) Request
}

// WorkloadFunc adapts a function to Workload.
type WorkloadFunc func(s Slot) Request

// Next calls f.
func (f WorkloadFunc) Next(s Slot) Request { return f(s) }

// Slot says which request is being chosen.
type Slot struct {
	Level   int           // index into Config.Levels
	User    int           // closed-loop user, or -1 in open loop
	Seq     int           // how many requests this caller chose before
	Elapsed time.Duration // since the level started (warm-up included)
	Rand    *rand.Rand
}

// Request is what one request sends.
type Request struct {
	// Prompt is the user message (Chat) or the prompt (Completions).
	Prompt string
	// MaxTokens is sent as max_tokens; zero omits it.
	MaxTokens int
	// Header is added to this request only (for example x-slo-tpot-ms).
	Header http.Header
	// Targets, when non-zero, judge this request instead of Config.Targets.
	Targets Targets
	// Class is a label kept on the Record, to split results by kind.
	Class string
	// Idle, when positive, sends nothing: a closed-loop user waits this
	// long and asks the workload again (a user who is away, as the users of
	// a flood before and after it); nothing is recorded. An open-loop
	// arrival ignores it and sends the request.
	Idle time.Duration
	// NoStream sends this request with "stream": false (as the OpenAI SDKs
	// do by default) and reads its whole answer; see Record.
	NoStream bool
}

// Synthetic makes prompts of InputLen words (the simulator counts one token
// per word; common short English words are one token on real tokenizers)
// and asks for OutputLen tokens. Both are drawn from the slot's Rand.
type Synthetic struct {
	InputLen, OutputLen Dist
}

// words are short, common, single-token words.
var words = strings.Fields(`the of and to in is it you that he was for on are as
with his they at be this have from or one had by word but not what all were we
when your can said there use an each which she do how their if will up other
about out many then them these so some her would make like him into time has
look two more write go see number no way could people my than first water been
call who oil its now find long down day did get come made may part`)

// Next implements Workload.
func (s Synthetic) Next(sl Slot) Request {
	n := s.InputLen.Draw(sl.Rand)
	return Request{Prompt: Words(sl.Rand, n), MaxTokens: s.OutputLen.Draw(sl.Rand)}
}

// Words returns n words drawn from r, separated by single spaces.
func Words(r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 5)
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()
}

// PromptFile is a list of prompts read from JSONL; each request draws one
// uniformly with the caller's Rand.
type PromptFile struct {
	Prompts []Request
	// MaxTokens is used for lines that give none; zero omits it.
	MaxTokens int
}

// Next implements Workload.
func (p *PromptFile) Next(sl Slot) Request {
	if len(p.Prompts) == 0 {
		return Request{MaxTokens: p.MaxTokens}
	}
	r := p.Prompts[sl.Rand.IntN(len(p.Prompts))]
	if r.MaxTokens == 0 {
		r.MaxTokens = p.MaxTokens
	}
	return r
}

// ReadPromptFile reads JSONL lines of the form
// {"prompt": "...", "max_tokens": 128} (also "output_len"; a "messages" list
// of chat messages is joined into one prompt). Blank lines are skipped.
func ReadPromptFile(r io.Reader) (*PromptFile, error) {
	var out []Request
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var l struct {
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
			OutputLen int    `json:"output_len"`
			Messages  []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			return nil, fmt.Errorf("prompt file line %d: %w", line, err)
		}
		p := l.Prompt
		for _, m := range l.Messages {
			if p != "" {
				p += "\n"
			}
			p += m.Content
		}
		if p == "" {
			return nil, fmt.Errorf("prompt file line %d: no prompt", line)
		}
		out = append(out, Request{Prompt: p, MaxTokens: max(l.MaxTokens, l.OutputLen)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("prompt file has no prompts")
	}
	return &PromptFile{Prompts: out}, nil
}
