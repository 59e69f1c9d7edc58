package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/kneecap/kneecap/wire"
)

// relayAssembled serves a reassembled request: the client did not stream,
// the engine streams. Each event is measured as relayStream measures it
// (TTFT, gaps, observations, the ticket's first token) and merged into
// the answer (wire.Assembler, bounded by maxWholeBody); nothing reaches
// the client until the engine's stream has ended, so every failure is
// answered with a status and an OpenAI-shaped error, and the answer is
// the single JSON body the engine would have sent. Observations are
// delivered at once: there is no client write for them to wait for.
func (p *Proxy) relayAssembled(ctx context.Context, x *exchange, resp *http.Response, timer *time.Timer) {
	rec := &x.rec
	rec.Reassembled = true
	var (
		m        outputMeter
		usage    *wire.Usage
		done     bool // saw [DONE]
		finished bool // saw a finish_reason
		errData  []byte
		readErr  error
		addErr   error
		asm      = wire.NewAssembler(maxWholeBody)
	)
	er := wire.NewEventReader(resp.Body)
	for !done {
		ev, err := er.Next()
		if err != nil {
			readErr = err
			break
		}
		if ev.Data == nil {
			continue
		}
		if ev.IsDone() {
			done = true
			break
		}
		now := time.Now()
		info, err := wire.InspectAs(x.shape, ev.Data)
		if err != nil {
			addErr = tell(errBadResponse, "the engine sent a stream event that is not JSON", err)
			break
		}
		if info.Error {
			errData = append([]byte(nil), ev.Data...)
			break
		}
		if info.Usage != nil {
			usage = info.Usage
		}
		finished = finished || info.Finished
		if info.Finished && x.tr != nil {
			x.tr.noteAnswer(x.shape, ev.Data)
		}
		if info.HasOutput {
			first := p.output(x, &m, now, timer)
			p.observe(x, &m) // before the limiter's wake (see relayStream)
			if first {
				x.ticket.FirstToken() // nothing to flush first: the next prefill may start
			}
		}
		if err := asm.AddInspected(ev.Data); err != nil { // InspectAs accepted it: valid JSON
			if errors.Is(err, wire.ErrAnswerTooLarge) {
				addErr = tell(errAnswerTooLarge, "the answer is larger than the "+strconv.Itoa(maxWholeBody)+
					" bytes the gateway reassembles for a request that is not streamed; ask for fewer tokens (max_tokens), or stream it", err)
			} else {
				addErr = tell(errBadResponse, "the engine sent a stream event that is not a JSON object", err)
			}
			break
		}
	}
	p.observeEnd(x, &m)
	if usage != nil {
		m.settle(x, *usage, true)
	} else {
		m.settle(x, wire.Usage{}, false)
	}
	fail := func(err error) {
		rec.E2E = time.Since(rec.Arrival)
		x.abort(err)
	}
	switch cause := context.Cause(ctx); {
	case x.r.Context().Err() != nil:
		fail(errClientGone) // nothing to write: the client left
	case errors.Is(cause, errFirstTokenTimeout), errors.Is(cause, errStreamIdle), errors.Is(cause, errResponseTimeout):
		fail(cause)
	case addErr != nil:
		fail(addErr)
	case errData != nil:
		rec.E2E = time.Since(rec.Arrival)
		x.engineErrorEvent(errData)
	case readErr != nil && readErr != io.EOF:
		fail(&failed{kind: errStreamBroken, cause: readErr}) // or wire.ErrEventTooLarge's row
	case !done && !finished:
		fail(errStreamEnded) // ended cleanly but with neither [DONE] nor a finish_reason
	default:
		p.writeAssembled(x, resp, asm.Body())
	}
}

// streamOnlyHeaders are the engine's response headers that belong to its
// stream and not to the JSON answer that replaces it.
var streamOnlyHeaders = [...]string{"Content-Type", "Content-Length", "Cache-Control", "X-Accel-Buffering"}

// writeAssembled answers the client with the reassembled body, with the
// engine's headers but those of its stream.
func (p *Proxy) writeAssembled(x *exchange, resp *http.Response, body []byte) {
	rec := &x.rec
	h := x.w.Header()
	copyResponseHeaders(h, resp.Header)
	for _, k := range streamOnlyHeaders {
		h.Del(k)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	x.deadline.refresh(time.Now())
	x.w.WriteHeader(http.StatusOK)
	rec.Status = http.StatusOK
	_, err := x.w.Write(body)
	rec.E2E = time.Since(rec.Arrival)
	if err != nil {
		x.breakOff(clientLeft(err))
	}
}

// engineErrorEvent answers with the engine's own error event, as the
// engine answers the request whole when it fails: its error object as the
// body, with the status its "code" names (400-599), else 502.
func (x *exchange) engineErrorEvent(data []byte) {
	var e struct {
		Code  json.RawMessage `json:"code"`
		Error *struct {
			Code json.RawMessage `json:"code"`
		} `json:"error"`
	}
	status := http.StatusBadGateway
	if json.Unmarshal(data, &e) == nil {
		code := e.Code
		if e.Error != nil {
			code = e.Error.Code
		}
		if n, err := strconv.Atoi(string(code)); err == nil && n >= 400 && n <= 599 {
			status = n
		}
	}
	x.record(failureOf(errErrorEvent), status, errErrorEvent)
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	x.deadline.refresh(time.Now())
	x.w.WriteHeader(status)
	_, _ = x.w.Write(append(data, '\n'))
}
