package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kneecap/kneecap/wire"
)

// maxWholeBody bounds how much of a non-streamed response is held to read
// its usage report; a larger body is relayed unparsed.
const maxWholeBody = 8 << 20

// errNotInspected stands for a whole body relayWhole did not inspect (an
// error status, or a body over maxWholeBody).
var errNotInspected = errors.New("proxy: body not inspected")

// maxPendingObs bounds the observations that wait for a flush, and is the
// size of a stream's queue of chunks (chunkQueue, 2 KiB) and so of the
// batches of GapObservers. Events that arrived together leave in one
// flush; the response's 4 KiB write buffer already sends them out every 20
// or so events of a typical size, so the bound rarely adds a write.
const maxPendingObs = 32

// relayStream relays an SSE response event by event, flushing each at
// once, and measures it. Per event it does one wire.Inspect and no other
// allocation: the event reader reuses its buffers and observations wait in
// the exchange's queue. Per flush it tells the ticket of the output, the
// observers of the chunks flushed; per stream (or full queue) the
// observers of batches.
func (p *Proxy) relayStream(ctx context.Context, x *exchange, resp *http.Response, timer *time.Timer) {
	w, rec := x.w, &x.rec
	copyResponseHeaders(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	rec.Status = resp.StatusCode
	rc := x.deadline.rc
	x.deadline.refresh(time.Now())
	writeErr := rc.Flush()
	clientGone := writeErr != nil

	var (
		// Observations wait in m and x.chunks until their chunks are
		// flushed to the client, so that no observer can delay a client;
		// they keep the time each chunk arrived.
		m         outputMeter
		usage     wire.Usage
		haveUsage bool
		done      bool // saw [DONE] or a finish_reason
		errEvent  bool
		readErr   error
		// The limiter hears of the first token once it has been flushed
		// too: its lock is every request's (Acquire, Release), and a
		// holder that the OS deschedules must not hold back the bytes a
		// client waits for first. Its effect (the next prefill may start)
		// comes a write later.
		tellFirst bool
	)
	// Flush when the reader holds no further event that already arrived:
	// each event still reaches the client as soon as it arrived, but events
	// that arrived together leave in one write, as nginx does.
	src := &countingReader{r: resp.Body}
	er := wire.NewEventReader(src)
	var consumed int64
	dirty := false
	for !clientGone {
		ev, err := er.Next()
		if err != nil {
			readErr = err
			break
		}
		consumed += int64(len(ev.Raw))
		now := time.Now()
		x.deadline.extend(now)
		forward := true
		if ev.Data != nil {
			if ev.IsDone() {
				done = true
			} else if info, err := wire.InspectAs(x.shape, ev.Data); err == nil {
				if info.Usage != nil {
					usage, haveUsage = *info.Usage, true
				}
				done = done || info.Finished
				if info.Finished && x.tr != nil {
					x.tr.noteAnswer(x.shape, ev.Data)
				}
				errEvent = errEvent || info.Error
				// Drop the usage-only chunk the gateway asked for and the
				// client did not.
				forward = !(info.UsageOnly && x.stripUsage)
				if info.HasOutput && p.output(x, &m, now, timer) {
					tellFirst = true
				}
			}
		}
		if forward {
			if _, writeErr = w.Write(ev.Raw); writeErr != nil {
				clientGone = true
				break
			}
			dirty = true
		}
		// Flush once the reader holds no event that already arrived, or
		// when the queue of observations waiting for a flush is full.
		if dirty && (consumed == src.n || x.chunks.waiting() >= maxPendingObs) {
			dirty = false
			if writeErr = rc.Flush(); writeErr != nil {
				clientGone = true
			}
		}
		if !dirty {
			// The controller hears of the first token before the
			// limiter does: what the limiter's wake then decides (a
			// grant, a refusal and its Retry-After) sees it.
			p.observe(x, &m)
			if tellFirst {
				x.ticket.FirstToken()
				tellFirst = false
			}
		}
	}
	// The rest (and net/http's end of the response, after the handler
	// returns) may follow a long wait for the engine's end of stream.
	x.deadline.refresh(time.Now())
	if dirty && !clientGone {
		_ = rc.Flush()
	}
	p.observeEnd(x, &m)
	if tellFirst {
		x.ticket.NoFirstToken() // no output: its prefill is over, unseen
	}
	end := time.Now()
	m.settle(x, usage, haveUsage)
	if !m.last.IsZero() {
		rec.E2E = m.last.Sub(rec.Arrival)
	} else {
		rec.E2E = end.Sub(rec.Arrival)
	}

	switch cause := context.Cause(ctx); {
	case clientGone || (readErr != nil && x.r.Context().Err() != nil):
		// A client that hangs up once the output has ended (finish_reason
		// or [DONE] seen) got its whole answer: judge it. Only one that
		// left before the end cancelled.
		if !done {
			x.breakOff(clientLeft(writeErr))
		}
	case errors.Is(cause, errFirstTokenTimeout), errors.Is(cause, errStreamIdle):
		x.breakOff(cause)
	case readErr != nil && readErr != io.EOF:
		x.breakOff(&failed{kind: errStreamBroken, cause: readErr}) // or wire.ErrEventTooLarge's row
	case errEvent:
		x.breakOff(errErrorEvent) // the engine's own error event was relayed
	case !done:
		// Ended cleanly but with neither [DONE] nor a finish_reason: cut short.
		x.breakOff(errStreamEnded)
	}
}

// clientDeadline keeps a write deadline on the client's connection about
// bound ahead: a client that takes no bytes for that long fails the write.
// extend moves the deadline only when an eighth of the bound has passed,
// so a busy stream does not pay for it per event; refresh moves it at once
// (before a write that follows a wait on the engine). net/http clears the
// deadline once the response is finished, so none carries over to the
// next request on the connection.
type clientDeadline struct {
	rc    *http.ResponseController
	bound time.Duration
	set   time.Time // when the deadline was last moved
}

func newClientDeadline(w http.ResponseWriter, bound time.Duration) clientDeadline {
	return clientDeadline{rc: http.NewResponseController(w), bound: bound}
}

func (d *clientDeadline) extend(now time.Time) {
	if d.bound > 0 && now.Sub(d.set) >= d.bound/8 {
		d.refresh(now)
	}
}

func (d *clientDeadline) refresh(now time.Time) {
	if d.bound > 0 {
		d.set = now
		_ = d.rc.SetWriteDeadline(now.Add(d.bound)) // unsupported by a test recorder: no bound
	}
}

// relayWhole relays a response that is not an SSE stream (a non-streamed
// completion, or an engine error), reading the usage report of a
// successful one. A body that no OpenAI client could read (not JSON: a
// plain-text error page, or a broken success) is replaced by an
// OpenAI-shaped error with the same status, or 502 for a success.
func (p *Proxy) relayWhole(ctx context.Context, x *exchange, resp *http.Response) {
	rec := &x.rec
	rec.Streamed = false // whatever was asked, no first token was observable
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxWholeBody+1))
	if err != nil {
		x.abort(engineFailure(ctx, x, errStreamBroken, err))
		return
	}
	x.deadline.refresh(time.Now())
	s := resp.StatusCode
	success, whole := s >= 200 && s < 300, len(body) <= maxWholeBody
	var info wire.ChunkInfo
	inspectErr := errNotInspected
	if success && whole {
		info, inspectErr = wire.InspectAs(x.shape, body)
	}
	// A success whose usage was read is JSON; any other body is checked
	// (json.Valid reads it once more: only on this rarer path).
	if whole && inspectErr != nil && !json.Valid(body) {
		rec.E2E = time.Since(rec.Arrival)
		if success {
			x.abort(tell(errBadResponse, "the engine answered "+strconv.Itoa(s)+" with a body that is not JSON", nil))
			return
		}
		f := &failed{kind: engineStatus(s), msg: engineText(s, body), retryAfter: resp.Header.Get("Retry-After")}
		if s >= 400 {
			f.status = s // 1xx and 3xx have no place here: the row's 502
		}
		x.abort(f)
		return
	}
	copyResponseHeaders(x.w.Header(), resp.Header)
	x.w.WriteHeader(s)
	rec.Status = s
	_, werr := x.w.Write(body)
	if werr == nil && len(body) > maxWholeBody {
		_, werr = io.Copy(x.w, resp.Body)
	}
	rec.E2E = time.Since(rec.Arrival)
	switch {
	case werr != nil:
		x.breakOff(clientLeft(werr))
		return
	case !success:
		x.breakOff(engineStatus(s)) // relayed as it is
		return
	}
	if inspectErr == nil && x.tr != nil {
		x.tr.noteAnswer(x.shape, body)
	}
	if inspectErr == nil && info.Usage != nil {
		rec.PromptTokens, rec.OutputTokens = info.Usage.PromptTokens, perChoice(info.Usage.CompletionTokens, rec.Choices)
		rec.CachedPromptTokens = info.Usage.CachedTokens
	} else {
		rec.Estimated = true // no usage report: output tokens unknown
	}
}

// engineText is the message of an engine error whose body is not JSON: the
// status and the start of the body, printable ASCII only.
func engineText(status int, body []byte) string {
	const maxText = 200
	text := make([]byte, 0, min(len(body), maxText))
	for _, c := range body {
		if len(text) == maxText {
			break
		}
		switch {
		case c >= 0x20 && c < 0x7f:
			text = append(text, c)
		case c == '\n' || c == '\r' || c == '\t':
			text = append(text, ' ')
		}
	}
	msg := "the engine answered " + strconv.Itoa(status)
	if t := strings.TrimSpace(string(text)); t != "" {
		msg += ": " + t
	}
	return msg
}

// engineStatus is the row of an engine's status that is not a success:
// the client's fault (4xx but 408 and 429) or the engine's.
func engineStatus(s int) error {
	if s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests {
		return errEngineRefused
	}
	return errEngineFailed
}

// perChoice is a request's output tokens per choice: the usage report
// counts every choice's.
func perChoice(tokens, choices int) int {
	if choices > 1 {
		return tokens / choices
	}
	return tokens
}

// countingReader counts the bytes read through it, so the relay knows when
// the event reader has consumed everything that arrived.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
