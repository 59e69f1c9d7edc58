package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// Cases is every stack, mode and client policy, in that order (the engine
// alone once per stack: nobody is refused there), each with the timing
// and seed of like.
func Cases(stacks []Stack, modes []Mode, clients []Clients, like Case) []Case {
	var out []Case
	for _, s := range stacks {
		for _, m := range modes {
			for i, cl := range clients {
				if m.Alone && i > 0 {
					continue
				}
				c := like
				c.Stack, c.Mode, c.Clients = s, m, cl
				out = append(out, c)
			}
		}
	}
	return out
}

// RunAll runs the cases, at most atOnce at a time (each has its own
// engine process or simulator, gateway and users), calling done with each
// result as it ends, and returns the results in the cases' order.
func RunAll(ctx context.Context, cases []Case, atOnce int, done func(Case, Result)) ([]Result, error) {
	res := make([]Result, len(cases))
	errs := make([]error, len(cases))
	slots := make(chan struct{}, max(atOnce, 1))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-slots }()
			res[i], errs[i] = c.Run(ctx)
			if done != nil && errs[i] == nil {
				mu.Lock()
				done(c, res[i])
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

// Table writes the results as a Markdown table.
func Table(w io.Writer, res []Result) error {
	var b strings.Builder
	b.WriteString("| engine | mode | clients | good req/s | served req/s | refusals (/s) | Retry-After | failed | errors | median TTFT | median TPOT | cap at end | mean running | idle slots | returns / refused again / gave up |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res {
		gw := func(s string) string {
			if r.Clients == "-" {
				return "-"
			}
			return s
		}
		ra := "-"
		if r.Refusals > 0 {
			ra = fmt.Sprintf("%.0f s", r.MedianRetryAfter)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.3f | %.3f | %d (%.2f) | %s | %d | %d | %.0f ms | %.1f ms | %s | %s | %s | %s |\n",
			r.Stack, r.Mode, r.Clients, r.Goodput, r.Served, r.Refusals, r.RefusalsPerSecond, ra, r.Failed, r.Errors,
			r.MedianTTFT, r.MedianTPOT, gw(fmt.Sprint(r.FinalCap)), gw(fmt.Sprintf("%.2f", r.MeanRunning)),
			gw(fmt.Sprintf("%.2f", r.IdleSlots)), gw(fmt.Sprintf("%d / %d / %d", r.Returned, r.RefusedAgain, r.GaveUp)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the results to path, indented.
func WriteJSON(path string, res []Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
