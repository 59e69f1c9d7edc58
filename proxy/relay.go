package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kneecap/kneecap/slo"
	"github.com/kneecap/kneecap/wire"
)

// maxWholeBody bounds how much of a non-streamed response is held to read
// its usage report; a larger body is relayed unparsed.
const maxWholeBody = 8 << 20

// maxPendingObs bounds the observations that wait for a flush (2 KiB).
// Events that arrived together leave in one flush; the response's 4 KiB
// write buffer already sends them out every 20 or so events of a typical
// size, so the bound rarely adds a write.
const maxPendingObs = 32

// relayStream relays an SSE response event by event, flushing each at
// once, and measures it. Per event it does one wire.Inspect and no other
// allocation: the event reader reuses its buffers and observations are
// passed by value.
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
		first, last time.Time
		usage       wire.Usage
		haveUsage   bool
		done        bool // saw [DONE] or a finish_reason
		errEvent    bool
		readErr     error
		// Observations wait here until their chunks are flushed to the
		// client, so that no observer can delay a client; they keep the
		// time each chunk arrived. The queue starts small and grows (up to
		// maxPendingObs) only for streams whose events arrive together.
		firstObs     FirstChunk
		haveFirstObs bool
		runningSum   int // over output chunks, for rec.MeanRunning
		chunkObs     = make([]Chunk, 0, 4)
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
				errEvent = errEvent || info.Error
				// Drop the usage-only chunk the gateway asked for and the
				// client did not.
				forward = !(info.UsageOnly && x.stripUsage)
				if info.HasOutput {
					rec.OutputChunks++
					running := int(p.running.Load())
					runningSum += running
					if first.IsZero() {
						first = now
						x.ticket.FirstToken()
						if timer != nil {
							timer.Stop()
						}
						x.idle.arm()
						rec.TTFT, rec.EngineTTFT = now.Sub(rec.Arrival), now.Sub(x.forwarded)
						firstObs, haveFirstObs = FirstChunk{At: now, TTFT: rec.TTFT, EngineTTFT: rec.EngineTTFT,
							QueueWait: rec.QueueWait, Running: running, Targets: rec.Targets}, rec.Choices == 0
					} else {
						gap := now.Sub(last)
						rec.MaxITL = max(rec.MaxITL, gap)
						if rec.Choices == 0 { // several choices interleave: their gaps are no one's
							chunkObs = append(chunkObs, Chunk{At: now, Gap: gap, Running: running, Targets: rec.Targets})
						}
					}
					last = now
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
		if dirty && (consumed == src.n || len(chunkObs) >= maxPendingObs) {
			dirty = false
			if writeErr = rc.Flush(); writeErr != nil {
				clientGone = true
			}
		}
		if !dirty {
			p.observe(&firstObs, &haveFirstObs, &chunkObs)
		}
	}
	// The rest (and net/http's end of the response, after the handler
	// returns) may follow a long wait for the engine's end of stream.
	x.deadline.refresh(time.Now())
	if dirty && !clientGone {
		_ = rc.Flush()
	}
	p.observe(&firstObs, &haveFirstObs, &chunkObs)
	end := time.Now()
	if rec.OutputChunks > 0 {
		rec.MeanRunning = float64(runningSum) / float64(rec.OutputChunks)
	}

	if haveUsage {
		rec.PromptTokens, rec.OutputTokens = usage.PromptTokens, perChoice(usage.CompletionTokens, rec.Choices)
	} else {
		rec.OutputTokens, rec.Estimated = rec.OutputChunks, true
	}
	if !last.IsZero() {
		rec.E2E = last.Sub(rec.Arrival)
	} else {
		rec.E2E = end.Sub(rec.Arrival)
	}

	switch {
	case clientGone || (readErr != nil && x.r.Context().Err() != nil):
		// A client that hangs up once the output has ended (finish_reason
		// or [DONE] seen) got its whole answer: judge it. Only one that
		// left before the end cancelled.
		if !done {
			x.fail(slo.ClientCancelled, clientReason(writeErr), 0)
		}
	case errors.Is(context.Cause(ctx), errFirstTokenTimeout):
		p.streamError(x, slo.EngineError, reasonFirstTokenTimeout, wire.TypeTimeout, "the engine sent no output within the first-token timeout")
	case errors.Is(context.Cause(ctx), errStreamIdle):
		p.streamError(x, slo.EngineError, reasonStreamIdle, wire.TypeTimeout, "the engine's stream stalled for longer than the stream-idle timeout")
	case errors.Is(readErr, wire.ErrEventTooLarge):
		p.streamError(x, slo.EngineError, reasonEventTooLarge, wire.TypeServer, "the engine sent an event larger than the gateway relays")
	case readErr != nil && readErr != io.EOF:
		x.err = readErr
		p.streamError(x, slo.EngineError, reasonStreamBroken, wire.TypeServer, "the engine's stream broke off")
	case errEvent:
		x.fail(slo.EngineError, reasonErrorEvent, 0) // the engine's own error event was relayed
	case !done:
		// Ended cleanly but with neither [DONE] nor a finish_reason: cut short.
		p.streamError(x, slo.EngineError, reasonStreamBroken, wire.TypeServer, "the engine's stream ended early")
	}
}

// observe delivers the observations of chunks that have been flushed to the
// client, and empties the queue (keeping its storage).
func (p *Proxy) observe(first *FirstChunk, haveFirst *bool, chunks *[]Chunk) {
	if *haveFirst {
		p.obs.FirstChunk(*first)
		*haveFirst = false
	}
	for _, c := range *chunks {
		p.obs.Chunk(c)
	}
	*chunks = (*chunks)[:0]
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

// clientReason names why a client counted as gone: it took no bytes within
// the client write timeout, or it left.
func clientReason(writeErr error) string {
	if errors.Is(writeErr, os.ErrDeadlineExceeded) {
		return reasonClientTooSlow
	}
	return ""
}

// streamError records a failure after the headers were sent and tells the
// client with an SSE error event (the only channel left).
func (p *Proxy) streamError(x *exchange, o slo.Outcome, reason, errType, msg string) {
	x.fail(o, reason, 0)
	x.deadline.refresh(time.Now()) // it follows a wait on the engine
	if _, err := x.w.Write(wire.ErrorEvent(errType, reason, msg)); err == nil {
		_ = x.deadline.rc.Flush()
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
		if !p.timedOut(ctx, x) {
			if x.r.Context().Err() != nil {
				x.fail(slo.ClientCancelled, "", 0)
			} else {
				x.err = err
				x.errorResponse(slo.EngineError, reasonStreamBroken, http.StatusBadGateway, wire.TypeServer, "the engine's response broke off")
			}
		}
		return
	}
	x.deadline.refresh(time.Now())
	s := resp.StatusCode
	if len(body) <= maxWholeBody && !json.Valid(body) {
		rec.E2E = time.Since(rec.Arrival)
		switch {
		case s >= 200 && s < 300:
			x.errorResponse(slo.EngineError, reasonBadResponse, http.StatusBadGateway, wire.TypeServer,
				"the engine answered "+strconv.Itoa(s)+" with a body that is not JSON")
		case s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests:
			copyRetryAfter(x.w.Header(), resp.Header)
			x.errorResponse(slo.InvalidRequest, reasonEngineStatus, s, wire.TypeInvalidRequest, engineText(s, body))
		default:
			copyRetryAfter(x.w.Header(), resp.Header)
			status := s
			if s < 400 {
				status = http.StatusBadGateway // 1xx and 3xx have no place here
			}
			x.errorResponse(slo.EngineError, reasonEngineStatus, status, wire.TypeServer, engineText(s, body))
		}
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
		x.fail(slo.ClientCancelled, clientReason(werr), 0)
		return
	case s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests:
		x.fail(slo.InvalidRequest, reasonEngineStatus, 0)
		return
	case s < 200 || s >= 300:
		x.fail(slo.EngineError, reasonEngineStatus, 0)
		return
	}
	if info, err := wire.InspectAs(x.shape, body); err == nil && info.Usage != nil {
		rec.PromptTokens, rec.OutputTokens = info.Usage.PromptTokens, perChoice(info.Usage.CompletionTokens, rec.Choices)
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

// copyRetryAfter keeps an engine's Retry-After on an error the gateway
// rewrote.
func copyRetryAfter(dst, src http.Header) {
	if v := src.Get("Retry-After"); v != "" {
		dst.Set("Retry-After", v)
	}
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
