package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"time"

	"github.com/kneecap/kneecap/wire"
)

// Outcome is how a request ended.
type Outcome int

const (
	// Completed: HTTP 200 and a stream that ended with [DONE] (or with a
	// finish_reason before the connection closed).
	Completed Outcome = iota
	// Rejected: HTTP 429 (or any status with an X-Kneecap-Reason header,
	// as the gateway's 503 while draining), an admission refusal. Never good.
	Rejected
	// Failed: any other status, a transport error, an error event in the
	// stream, a stream cut short or a request timeout. Never good.
	Failed
	// Unfinished: still running when its level ended; not measured.
	Unfinished
)

func (o Outcome) String() string {
	return [...]string{"completed", "rejected", "failed", "unfinished"}[o]
}

// MarshalText makes an Outcome readable in JSON.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Record is one request's timeline. Latencies count from Due: in open loop
// the moment the request was scheduled, in closed loop the moment it was
// sent, so a slow sender cannot hide a slow server.
//
// A request that is not streamed (NoStream) has no First, Last, TTFT,
// TPOT or ITL: its client sees only the end, and E2E runs from Due to the
// end of the answer's body.
type Record struct {
	Level    int    // index into Config.Levels
	User     int    // closed-loop user, or -1 in open loop
	Class    string // Request.Class
	NoStream bool   // sent with "stream": false (Request.NoStream, Config.NoStream)

	Due   time.Time // when the request was due
	Sent  time.Time // when it was handed to the HTTP client
	First time.Time // first chunk carrying output; zero if none
	Last  time.Time // last chunk carrying output; zero if none
	End   time.Time // when the response ended (or failed)

	Outcome Outcome
	Status  int    // HTTP status; 0 for a transport error
	Err     string // why it failed, or the error message of a 429
	// RetryAfter is the server's wait on a refusal or failure: its
	// Retry-After, or, for clients that prefer it (Config.Clients
	// ClientsSDK), its retry-after-ms when it sent one; zero if none.
	RetryAfter time.Duration
	// Attempt counts the earlier attempts of the same request (the
	// OpenAI SDKs' retries; 0 for a first attempt), and GaveUp marks a
	// refused or failed attempt that its client did not retry: the
	// request failed in its application (see Clients).
	Attempt int
	GaveUp  bool
	// Reason is the gateway's X-Kneecap-Reason header on a rejection
	// (queue_full, queue_timeout, deadline, draining); empty if none.
	Reason string

	PromptTokens int
	OutputTokens int
	// Estimated is true when the server sent no usage report and
	// OutputTokens counts output chunks instead.
	Estimated bool

	TTFT time.Duration   // First - Due
	E2E  time.Duration   // Last - Due; not streamed: End - Due
	TPOT time.Duration   // (E2E - TTFT) / (OutputTokens - 1); zero with one token
	ITL  []time.Duration // gaps between successive output chunks

	Targets  Targets // the targets it was judged by
	Good     bool    // completed and met every target in Targets
	Measured bool    // ended inside its level's measured window
}

// HasTPOT reports whether the request has a TPOT (streamed, completed,
// more than one output token).
func (r *Record) HasTPOT() bool { return !r.NoStream && r.Outcome == Completed && r.OutputTokens > 1 }

// Judge sets Good from the record's latencies and t. A streamed request is
// good when it completed with output and met every set bound at once; a
// request with one output token has no TPOT and so cannot miss that bound
// (as vLLM). A request that is not streamed is judged as its client felt
// it, as the gateway judges it (slo.Judge): by E2E alone, against t.E2E
// when set, else against the E2E a stream of its length meeting both
// other bounds would have, t.TTFT + t.TPOT x (output tokens - 1).
func (r *Record) Judge(t Targets) {
	r.Targets = t
	if r.NoStream {
		bound := t.E2E
		if bound == 0 && t.TTFT > 0 {
			bound = t.TTFT + t.TPOT*time.Duration(max(r.OutputTokens-1, 0))
		}
		r.Good = r.Outcome == Completed && r.OutputTokens > 0 && (bound == 0 || r.E2E <= bound)
		return
	}
	r.Good = r.Outcome == Completed && r.OutputTokens > 0 && !r.First.IsZero() &&
		(t.TTFT == 0 || r.TTFT <= t.TTFT) &&
		(t.TPOT == 0 || !r.HasTPOT() || r.TPOT <= t.TPOT) &&
		(t.E2E == 0 || r.E2E <= t.E2E)
}

// finish computes the derived latencies once First, Last (or, not
// streamed, End) and OutputTokens are known.
func (r *Record) finish() {
	if r.NoStream {
		if !r.End.IsZero() {
			r.E2E = r.End.Sub(r.Due)
		}
		return
	}
	if r.First.IsZero() {
		return
	}
	r.TTFT = r.First.Sub(r.Due)
	r.E2E = r.Last.Sub(r.Due)
	if r.OutputTokens > 1 {
		r.TPOT = (r.E2E - r.TTFT) / time.Duration(r.OutputTokens-1)
	}
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type requestBody struct {
	Model         string    `json:"model,omitempty"`
	Messages      []message `json:"messages,omitempty"`
	Prompt        *string   `json:"prompt,omitempty"`
	MaxTokens     int       `json:"max_tokens,omitempty"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
}

// streamed reports whether req is sent as a stream.
func (c *Config) streamed(req Request) bool { return !c.NoStream && !req.NoStream }

// body encodes req for the configured endpoint: streamed, asking for the
// usage report; or, not streamed, as the OpenAI SDKs send it ("stream":
// false, whose answer always has usage).
func (c *Config) body(req Request) []byte {
	b := requestBody{Model: c.Model, MaxTokens: req.MaxTokens, Stream: c.streamed(req), IgnoreEOS: c.IgnoreEOS}
	if b.Stream {
		b.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{true}
	}
	if c.Endpoint == Completions {
		b.Prompt = &req.Prompt
	} else {
		b.Messages = []message{{Role: "user", Content: req.Prompt}}
	}
	out, _ := json.Marshal(b) // cannot fail: strings and ints
	return out
}

// send performs one streamed request due at due and measures it. ctx ending
// makes the record Unfinished.
func (c *Config) send(ctx context.Context, client *http.Client, url string, req Request, due time.Time) Record {
	rec := Record{Due: due, Class: req.Class, User: -1, NoStream: !c.streamed(req)}
	if req.MaxTokens > 1 && !rec.NoStream {
		rec.ITL = make([]time.Duration, 0, min(req.MaxTokens-1, 4096))
	}
	body := c.body(req)
	rctx := ctx
	if c.RequestTimeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, c.RequestTimeout)
		defer cancel()
	}
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		rec.Outcome, rec.Err, rec.End = Failed, err.Error(), time.Now()
		return rec
	}
	hreq.Header.Set("Content-Type", "application/json")
	if !rec.NoStream {
		hreq.Header.Set("Accept", "text/event-stream")
	} else {
		hreq.Header.Set("Accept", "application/json")
	}
	for k, vs := range c.Header {
		hreq.Header[k] = vs
	}
	for k, vs := range req.Header {
		hreq.Header[k] = vs
	}
	// Which connection carried it: a failure on one that sat idle in the
	// pool (a server that closed it as it was reused) is told apart from
	// one on a fresh connection. net/http counts as reused both a
	// connection kept alive from an earlier request and one dialed for a
	// request that another connection served.
	var conn httptrace.GotConnInfo
	hreq = hreq.WithContext(httptrace.WithClientTrace(hreq.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { conn = i }}))
	rec.Sent = time.Now()
	resp, err := client.Do(hreq)
	if err != nil {
		msg := err.Error()
		if conn.Reused {
			msg += fmt.Sprintf(" (on a connection idle %v in the pool before it)", conn.IdleTime.Round(time.Millisecond))
		}
		return rec.fail(ctx, 0, msg)
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		rec.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		if ms := parseRetryAfterMs(resp.Header.Get("Retry-After-Ms")); ms > 0 && c.Clients == ClientsSDK {
			rec.RetryAfter = ms
		}
		msg := errorMessage(resp.Body)
		rec = rec.fail(ctx, resp.StatusCode, msg)
		rec.Reason = resp.Header.Get("X-Kneecap-Reason")
		// A 429, or the gateway's 503 while draining, is a refusal to admit.
		if (resp.StatusCode == http.StatusTooManyRequests || rec.Reason != "") && rec.Outcome == Failed {
			rec.Outcome = Rejected
		}
		return rec
	}
	if rec.NoStream {
		return c.readWhole(ctx, rec, resp.Body)
	}
	return c.readStream(ctx, rec, resp.Body)
}

// maxWholeAnswer bounds the body of an answer that is not streamed.
const maxWholeAnswer = 64 << 20

// readWhole reads the JSON answer of a request that is not streamed into
// rec: its usage, and E2E to the end of the body.
func (c *Config) readWhole(ctx context.Context, rec Record, body io.Reader) Record {
	raw, err := io.ReadAll(io.LimitReader(body, maxWholeAnswer+1))
	if err != nil {
		return rec.fail(ctx, rec.Status, err.Error())
	}
	if len(raw) > maxWholeAnswer {
		return rec.fail(ctx, rec.Status, "answer larger than 64 MiB")
	}
	var v struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *wire.Usage       `json:"usage"`
		Error   json.RawMessage   `json:"error"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return rec.fail(ctx, rec.Status, "malformed answer: "+err.Error())
	}
	if len(v.Error) > 0 && string(v.Error) != "null" || len(v.Choices) == 0 {
		return rec.fail(ctx, rec.Status, "not an answer: "+truncate(string(raw), 200))
	}
	rec.End = time.Now()
	rec.Outcome = Completed
	if v.Usage != nil {
		rec.PromptTokens, rec.OutputTokens = v.Usage.PromptTokens, v.Usage.CompletionTokens
	} else {
		rec.OutputTokens, rec.Estimated = 1, true // some output; its length unknown
	}
	rec.finish()
	return rec
}

// readStream reads the SSE stream of a 200 response into rec.
func (c *Config) readStream(ctx context.Context, rec Record, body io.Reader) Record {
	er := wire.NewEventReader(body)
	var usage *wire.Usage
	chunks, finished := 0, false
	for {
		ev, err := er.Next()
		if err != nil {
			if errors.Is(err, io.EOF) && finished {
				break // the connection closed after a finish_reason: accept it
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended before [DONE]")
			}
			return rec.fail(ctx, rec.Status, err.Error())
		}
		if ev.Data == nil {
			continue
		}
		if ev.IsDone() {
			break
		}
		info, err := wire.Inspect(ev.Data)
		if err != nil {
			return rec.fail(ctx, rec.Status, "malformed chunk: "+err.Error())
		}
		if info.Error {
			return rec.fail(ctx, rec.Status, "error event: "+truncate(string(ev.Data), 200))
		}
		if info.Usage != nil {
			usage = info.Usage
		}
		finished = finished || info.Finished
		if info.HasOutput {
			now := time.Now()
			if rec.First.IsZero() {
				rec.First = now
			} else {
				rec.ITL = append(rec.ITL, now.Sub(rec.Last))
			}
			rec.Last = now
			chunks++
		}
	}
	rec.End = time.Now()
	rec.Outcome = Completed
	if usage != nil {
		rec.PromptTokens, rec.OutputTokens = usage.PromptTokens, usage.CompletionTokens
	} else {
		rec.OutputTokens, rec.Estimated = chunks, true
	}
	rec.finish()
	return rec
}

// fail ends rec as Failed, or Unfinished when ctx (the level) has ended.
func (r Record) fail(ctx context.Context, status int, msg string) Record {
	r.End = time.Now()
	r.Status = status
	r.Err = msg
	r.Outcome = Failed
	if ctx.Err() != nil {
		r.Outcome = Unfinished
	}
	r.finish()
	return r
}

// errorMessage reads the message of an OpenAI-shaped error body, or the
// start of any other body.
func errorMessage(r io.Reader) string {
	raw, _ := io.ReadAll(io.LimitReader(r, 4<<10))
	var b wire.ErrorBody
	if json.Unmarshal(raw, &b) == nil && b.Error.Message != "" {
		if b.Error.Code != nil {
			return *b.Error.Code + ": " + b.Error.Message
		}
		return b.Error.Message
	}
	return truncate(strings.TrimSpace(string(raw)), 200)
}

// parseRetryAfter reads a Retry-After header: whole seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s...", s[:n])
}
