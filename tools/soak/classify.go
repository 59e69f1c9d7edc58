package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// class is what a client made of an answer.
type class int

const (
	classComplete class = iota // a stream that ended with [DONE], or a 2xx JSON completion
	classError                 // an OpenAI-shaped error: a JSON body with a status, or an SSE error event
	classClient                // a bad client's own doing: it left, or was cut off as too slow
	classBroken                // neither complete nor an OpenAI-shaped error: must never happen
)

var classNames = [...]string{"complete", "error", "client-side", "BROKEN"}

// result is one request's outcome from its client's view.
type result struct {
	class      class
	what       string // the error ("429 queue_timeout"), the client's kind, or what broke
	status     int
	retryAfter time.Duration
	readErr    error // reading the answer failed
}

func broken(what string) result     { return result{class: classBroken, what: what} }
func clientSide(what string) result { return result{class: classClient, what: what} }

// openAIError is the part of an OpenAI error body a client reads.
type openAIError struct {
	Error *struct {
		Type string `json:"type"`
		Code any    `json:"code"` // a string from the gateway, a number in vLLM's own errors
	} `json:"error"`
}

func (e openAIError) code() string {
	if e.Error.Code == nil {
		return "null"
	}
	if f, ok := e.Error.Code.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(e.Error.Code)
}

// readAnswer reads a response from body (resp.Body, or a slow reader of
// it) as a client does. With leaveAfter > 0 the client hangs up after that
// many data events of a stream (left: true) unless the answer ended first.
func readAnswer(resp *http.Response, body io.Reader, leaveAfter int) (res result, left bool) {
	res.status = resp.StatusCode
	if ra := resp.Header.Get("Retry-After"); ra != "" && resp.StatusCode >= 400 {
		if secs, err := strconv.Atoi(ra); err == nil && secs >= 0 {
			res.retryAfter = time.Duration(secs) * time.Second
		}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, err := io.ReadAll(io.LimitReader(body, 64<<20))
		if err != nil {
			res.class, res.readErr = classBroken, err
			res.what = fmt.Sprintf("%d: reading the body: %s", resp.StatusCode, errKind(err))
			return res, false
		}
		var e openAIError
		var ok struct {
			Choices []json.RawMessage `json:"choices"`
		}
		switch {
		case json.Unmarshal(b, &e) == nil && e.Error != nil && resp.StatusCode >= 400:
			res.class, res.what = classError, fmt.Sprintf("%d %s", resp.StatusCode, e.code())
		case resp.StatusCode/100 == 2 && json.Unmarshal(b, &ok) == nil && len(ok.Choices) > 0:
			res.class = classComplete
		default:
			res.class = classBroken
			res.what = fmt.Sprintf("%d %s body that is neither a completion nor an OpenAI error: %.80q",
				resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		return res, false
	}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 16<<10), 16<<20)
	var (
		events, garbled int
		done, finished  bool
		errWhat         string
	)
	for sc.Scan() {
		line := sc.Bytes()
		data, isData := bytes.CutPrefix(line, []byte("data:"))
		if !isData {
			continue
		}
		data = bytes.TrimLeft(data, " ")
		if string(data) == "[DONE]" {
			done = true
			continue
		}
		var e openAIError
		if json.Unmarshal(data, &e) == nil && e.Error != nil {
			if errWhat == "" {
				errWhat = fmt.Sprintf("%d %s (SSE error event)", resp.StatusCode, e.code())
			}
			continue
		}
		var chunk struct {
			Choices []struct {
				Finish *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal(data, &chunk) != nil {
			garbled++ // relayed as the engine sent it (the broken-sse fault)
		} else {
			for _, c := range chunk.Choices {
				finished = finished || (c.Finish != nil && *c.Finish != "")
			}
		}
		events++
		if leaveAfter > 0 && events >= leaveAfter && !done && errWhat == "" {
			return res, true
		}
	}
	err := sc.Err()
	switch {
	case errWhat != "":
		res.class, res.what = classError, errWhat
	case err != nil:
		res.class, res.readErr = classBroken, err
		res.what = fmt.Sprintf("stream broke off after %d data events with neither [DONE] nor an error event: %s", events, errKind(err))
	case done:
		res.class = classComplete
	case finished:
		res.class, res.what = classComplete, "finish_reason but no [DONE]"
	default:
		res.class = classBroken
		res.what = fmt.Sprintf("stream ended cleanly after %d data events with neither [DONE] nor an error event", events)
	}
	if garbled > 0 && res.class == classComplete {
		res.what = "with data lines that are not JSON"
	}
	return res, false
}

// recorder counts outcomes. Safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	counts  map[outcomeKey]int
	faults  map[faultKey]int // uvicorn: injected fault -> what the client saw
	bad     map[badKey]int   // a bad client's behaviour -> what it saw
	total   int
	brokens []string // the first few, with what was asked
}

type outcomeKey struct {
	engine string
	class  class
	what   string
}

type badKey struct {
	engine   string
	behavior behavior
	class    class
	what     string
}

type faultKey struct {
	fault  string
	stream bool
	class  class
	what   string
}

func newRecorder() *recorder {
	return &recorder{counts: map[outcomeKey]int{}, faults: map[faultKey]int{}, bad: map[badKey]int{}}
}

func (r *recorder) add(engine string, j job, res result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	what := res.what
	if res.class == classComplete {
		what = "" // complete is complete; its notes are kept below
		if res.what != "" {
			r.counts[outcomeKey{engine, classComplete, "note: " + res.what}]++
		}
	}
	r.counts[outcomeKey{engine, res.class, what}]++
	if j.fault != "" {
		r.faults[faultKey{j.fault, j.stream, res.class, res.what}]++
	}
	if j.behavior != normal {
		r.bad[badKey{engine, j.behavior, res.class, res.what}]++
	}
	if res.class == classBroken && len(r.brokens) < 20 {
		r.brokens = append(r.brokens, fmt.Sprintf("%s %s stream=%t fault=%q client=%s: %s",
			engine, j.path(), j.stream, j.fault, behaviorNames[j.behavior], res.what))
	}
}

// snapshot returns the totals: requests, and broken ones.
func (r *recorder) snapshot() (total, brokenN int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range r.counts {
		if k.class == classBroken {
			brokenN += n
		}
	}
	return r.total, brokenN
}

// byEngine returns, per engine, the count of each class (notes excluded).
func (r *recorder) byEngine(engine string) (classes [4]int, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range r.counts {
		if k.engine == engine && !strings.HasPrefix(k.what, "note: ") {
			classes[k.class] += n
			total += n
		}
	}
	return classes, total
}

// rows returns the counts of one engine and class, largest first.
func (r *recorder) rows(engine string, c class) []countRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []countRow
	for k, n := range r.counts {
		if k.engine == engine && k.class == c {
			out = append(out, countRow{k.what, n})
		}
	}
	sortRows(out)
	return out
}

type countRow struct {
	what string
	n    int
}

func sortRows(rows []countRow) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].n != rows[j].n {
			return rows[i].n > rows[j].n
		}
		return rows[i].what < rows[j].what
	})
}
