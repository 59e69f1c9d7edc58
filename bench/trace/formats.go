package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kneecap/kneecap/reqlog"
)

// readMooncake reads Mooncake's JSONL: {"timestamp": ms, "input_length":
// n, "output_length": n, "hash_ids": [...]}, sorted by timestamp.
func readMooncake(t *Trace, sc *bufio.Scanner) error {
	var prev float64
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var l struct {
			Timestamp *float64 `json:"timestamp"`
			Input     *int     `json:"input_length"`
			Output    *int     `json:"output_length"`
			HashIDs   []uint64 `json:"hash_ids"`
		}
		bad := func(field string, format string, args ...any) error {
			return &Error{File: t.File, Line: line, Field: field, Err: fmt.Errorf(format, args...)}
		}
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return bad(te.Field, "want %s, got a JSON %s", te.Type, te.Value)
			}
			return &Error{File: t.File, Line: line, Err: err}
		}
		switch {
		case l.Timestamp == nil:
			return bad("timestamp", "missing")
		case l.Input == nil:
			return bad("input_length", "missing")
		case l.Output == nil:
			return bad("output_length", "missing")
		case *l.Timestamp < 0:
			return bad("timestamp", "negative (%g ms)", *l.Timestamp)
		case *l.Timestamp < prev:
			return bad("timestamp", "%g ms is before the line before it (%g ms): a trace must be sorted by arrival", *l.Timestamp, prev)
		case *l.Input < 1:
			return bad("input_length", "must be at least 1 (got %d)", *l.Input)
		case *l.Output < 0:
			return bad("output_length", "negative (%d)", *l.Output)
		}
		prev = *l.Timestamp
		t.Requests = append(t.Requests, Request{
			At: time.Duration(*l.Timestamp * float64(time.Millisecond)), Prompt: *l.Input, Output: *l.Output,
			Blocks: l.HashIDs, Line: line,
		})
	}
	return rebase(t)
}

// readAzure reads the Azure LLM inference trace CSV: a header naming
// TIMESTAMP, ContextTokens and GeneratedTokens (in any order, any case),
// then one request a row, TIMESTAMP a datetime such as
// 2023-11-16 18:15:46.6805900.
func readAzure(t *Trace, sc *bufio.Scanner) error {
	if !sc.Scan() {
		return nil
	}
	cols := map[string]int{}
	for i, h := range splitCSV(sc.Text()) {
		cols[strings.ToLower(h)] = i
	}
	idx := [3]int{}
	for i, name := range []string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"} {
		c, ok := cols[strings.ToLower(name)]
		if !ok {
			return &Error{File: t.File, Line: 1, Field: name, Err: errors.New("missing column (want a header TIMESTAMP,ContextTokens,GeneratedTokens)")}
		}
		idx[i] = c
	}
	var first, prev time.Time
	for line := 2; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		row := splitCSV(text)
		bad := func(field string, format string, args ...any) error {
			return &Error{File: t.File, Line: line, Field: field, Err: fmt.Errorf(format, args...)}
		}
		if len(row) <= max(idx[0], idx[1], idx[2]) {
			return bad("", "%d columns, the header has %d", len(row), len(cols))
		}
		at, err := parseDatetime(row[idx[0]])
		if err != nil {
			return bad("TIMESTAMP", "%q: want a datetime such as 2023-11-16 18:15:46.6805900", row[idx[0]])
		}
		in, err := strconv.Atoi(row[idx[1]])
		if err != nil || in < 1 {
			return bad("ContextTokens", "%q: want a whole number of at least 1", row[idx[1]])
		}
		out, err := strconv.Atoi(row[idx[2]])
		if err != nil || out < 0 {
			return bad("GeneratedTokens", "%q: want a whole number of at least 0", row[idx[2]])
		}
		if first.IsZero() {
			first, prev = at, at
		}
		if at.Before(prev) {
			return bad("TIMESTAMP", "%s is before the row before it (%s): a trace must be sorted by arrival", row[idx[0]], prev.Format(azureLayout))
		}
		prev = at
		t.Requests = append(t.Requests, Request{At: at.Sub(first), Prompt: in, Output: out, Line: line})
	}
	return nil
}

const azureLayout = "2006-01-02 15:04:05.9999999"

func parseDatetime(s string) (time.Time, error) {
	var err error
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999"} {
		var t time.Time
		if t, err = time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, err
}

func splitCSV(s string) []string {
	f := strings.Split(s, ",")
	for i := range f {
		f[i] = strings.Trim(strings.TrimSpace(f[i]), `"`)
	}
	return f
}

// readKneecap reads kneecap's request log (reqlog.Line a line). Lines are
// written as requests end, so they are sorted here by arrival. A request
// refused before its body was read has no lengths: it gets the median
// prompt of the requests that have one, and the median output of those
// that completed; one that was not completed asks for its max_tokens, else
// that median. Invalid requests (a 4xx) are left out: their bodies were
// wrong, and a replay cannot send them again.
func readKneecap(t *Trace, sc *bufio.Scanner) error {
	type entry struct {
		at  time.Time
		req Request
		ok  bool // completed: its output is known
	}
	var es []entry
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var l reqlog.Line
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return &Error{File: t.File, Line: line, Field: te.Field, Err: fmt.Errorf("want %s, got a JSON %s", te.Type, te.Value)}
			}
			return &Error{File: t.File, Line: line, Err: err}
		}
		bad := func(field string, format string, args ...any) error {
			return &Error{File: t.File, Line: line, Field: field, Err: fmt.Errorf(format, args...)}
		}
		switch {
		case l.Arrival.IsZero():
			return bad("arrival", "missing")
		case l.Outcome == "":
			return bad("outcome", "missing")
		case l.PromptTokens < 0:
			return bad("prompt_tokens", "negative (%d)", l.PromptTokens)
		case l.OutputTokens < 0 || l.MaxTokens < 0:
			return bad("output_tokens", "negative")
		}
		if l.Outcome == reqlog.OutcomeInvalid {
			continue
		}
		e := entry{at: l.Arrival, req: Request{Prompt: l.PromptTokens, Line: line}}
		e.ok = l.Outcome == reqlog.OutcomeGood || l.Outcome == reqlog.OutcomeLate
		if e.ok {
			e.req.Output = l.OutputTokens
		} else {
			e.req.Output = l.MaxTokens
		}
		for i, h := range l.Prefix {
			v, err := strconv.ParseUint(h, 16, 64)
			if err != nil {
				return bad(fmt.Sprintf("prefix[%d]", i), "%q: want 16 hex digits", h)
			}
			e.req.Blocks = append(e.req.Blocks, v)
		}
		es = append(es, e)
	}
	slices.SortStableFunc(es, func(a, b entry) int { return a.at.Compare(b.at) })
	var prompts, outputs []int
	for _, e := range es {
		if e.req.Prompt > 0 {
			prompts = append(prompts, e.req.Prompt)
		}
		if e.ok && e.req.Output > 0 {
			outputs = append(outputs, e.req.Output)
		}
	}
	mp, mo := median(prompts), median(outputs)
	for _, e := range es {
		r := e.req
		r.At = e.at.Sub(es[0].at)
		if r.Prompt == 0 {
			r.Prompt = max(mp, 1)
		}
		if !e.ok && r.Output == 0 {
			r.Output = mo
		}
		t.Requests = append(t.Requests, r)
	}
	return nil
}

func median(v []int) int {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// rebase makes the first arrival 0.
func rebase(t *Trace) error {
	if len(t.Requests) == 0 {
		return nil
	}
	first := t.Requests[0].At
	for i := range t.Requests {
		t.Requests[i].At -= first
	}
	return nil
}
