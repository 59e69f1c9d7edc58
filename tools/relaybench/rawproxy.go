package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// rawProxy is the floor of a Go relay: the least a correct HTTP/1.1 relay of
// streamed responses does, to measure what Go itself costs per chunk apart
// from net/http's client. The client side is net/http's server (as in every
// Go relay); the engine side is hand-written: a pool of keep-alive
// connections, the request written in one write, the response head parsed
// by hand, the chunked body de-chunked as it arrives, and every read's data
// written to the client in one flush. It is not kneecap and measures
// nothing; it exists only as a reference target (rawproxy and rawedge).
//
// With edge set, the body is read with one read(2) per arrival: Go's
// net.Conn reads until EAGAIN before it waits (two reads per chunk when
// chunks arrive one at a time), while nginx, on an edge-triggered epoll,
// takes a short read to mean the socket is drained. rawProxy does the same
// through syscall.RawConn: the whole body is relayed inside one RawConn.Read
// callback, which returns false (wait for readiness) after a short read.
// That is safe only inside one RawConn.Read call: each call clears the
// descriptor's readiness before its first callback, so a callback that
// skipped its first read could miss data that arrived in between.
type rawProxy struct {
	addr string // the engine's host:port
	edge bool

	mu   sync.Mutex
	idle []*upConn
}

// upConn is one keep-alive connection to the engine.
type upConn struct {
	c   *net.TCPConn
	rc  syscall.RawConn
	buf []byte // read buffer; also holds the request while it is written
}

// rawBufSize is the read buffer per connection, as net/http's Transport.
const rawBufSize = 32 << 10

func (p *rawProxy) get() (*upConn, bool, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		u := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return u, true, nil
	}
	p.mu.Unlock()
	c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		return nil, false, err
	}
	tc := c.(*net.TCPConn)
	rc, err := tc.SyscallConn()
	if err != nil {
		c.Close()
		return nil, false, err
	}
	return &upConn{c: tc, rc: rc, buf: make([]byte, rawBufSize)}, false, nil
}

func (p *rawProxy) put(u *upConn) {
	p.mu.Lock()
	p.idle = append(p.idle, u)
	p.mu.Unlock()
}

// rawHop lists the hop-by-hop headers that are not forwarded (RFC 9110
// section 7.6.1), plus the framing headers the relay sets itself.
var rawHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true,
}

// errReuse marks a failure on a reused connection before any response byte
// arrived: the engine may have closed it while idle, so the request is
// retried once on a new connection.
var errReuse = errors.New("reused connection failed before the response")

// sink is where a response goes: net/http's ResponseWriter (httpSink) or a
// hand-written HTTP/1.1 response on a raw connection (connSink).
type sink interface {
	Header() http.Header
	WriteHeader(status int)
	Write(b []byte) (int, error)
	Flush() error
}

type httpSink struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (h httpSink) Flush() error { return h.rc.Flush() }

func (p *rawProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, "could not read the request body", http.StatusBadRequest)
		return
	}
	err = p.relay(httpSink{w, http.NewResponseController(w)}, r, body)
	if err != nil && !errors.Is(err, errHeadersSent) && r.Context().Err() == nil {
		http.Error(w, "the engine could not be reached", http.StatusBadGateway)
	}
}

// relay sends the request to the engine and relays the answer, retrying
// once on a new connection when a reused one had gone stale.
func (p *rawProxy) relay(w sink, r *http.Request, body []byte) error {
	err := p.roundTrip(w, r, body)
	if errors.Is(err, errReuse) {
		err = p.roundTrip(w, r, body)
	}
	return err
}

var errHeadersSent = errors.New("failed after the response headers were sent")

// roundTrip sends one request on a pooled connection and relays its answer.
// The connection goes back to the pool only after a complete response.
func (p *rawProxy) roundTrip(w sink, r *http.Request, body []byte) error {
	u, reused, err := p.get()
	if err != nil {
		return err
	}
	// A client that leaves cancels the engine request: the pending read
	// fails at once and the connection is closed.
	stop := context.AfterFunc(r.Context(), func() { u.c.SetReadDeadline(time.Unix(1, 0)) })
	ok := false
	defer func() {
		if stop() && ok {
			p.put(u)
		} else {
			u.c.Close()
		}
	}()

	req := u.buf[:0]
	req = append(req, r.Method...)
	req = append(req, ' ')
	req = append(req, r.URL.RequestURI()...)
	req = append(req, " HTTP/1.1\r\nHost: "...)
	req = append(req, p.addr...)
	req = append(req, "\r\n"...)
	for k, vv := range r.Header {
		if rawHop[k] {
			continue
		}
		for _, v := range vv {
			req = append(req, k...)
			req = append(req, ": "...)
			req = append(req, v...)
			req = append(req, "\r\n"...)
		}
	}
	req = append(req, "Content-Length: "...)
	req = strconv.AppendInt(req, int64(len(body)), 10)
	req = append(req, "\r\n\r\n"...)
	if len(req)+len(body) <= cap(u.buf) {
		req = append(req, body...)
		_, err = u.c.Write(req)
	} else {
		_, err = (&net.Buffers{req, body}).WriteTo(u.c)
	}
	if cap(req) > cap(u.buf) {
		u.buf = req[:cap(req)]
	}
	if err != nil {
		if reused {
			return errReuse
		}
		return err
	}

	// The response head, in as many reads as it takes.
	buf := u.buf[:cap(u.buf)]
	have := 0
	var head rawHead
	for {
		n, err := u.c.Read(buf[have:])
		have += n
		if err != nil {
			if reused && have == 0 {
				return errReuse
			}
			return err
		}
		end := bytes.Index(buf[:have], []byte("\r\n\r\n"))
		if end < 0 {
			if have == len(buf) {
				return errors.New("response head too large")
			}
			continue
		}
		if head, err = parseHead(buf[:end+2], w.Header()); err != nil {
			return err
		}
		copy(buf, buf[end+4:have])
		have -= end + 4
		break
	}
	w.WriteHeader(head.status)
	if err := w.Flush(); err != nil {
		return errHeadersSent
	}
	if !head.chunked {
		// Content-Length or until close: copy as it comes, one flush per read.
		left := head.length
		fw := flushWriter{w}
		var err error
		if left >= 0 {
			if int64(have) > left {
				return errHeadersSent // more bytes than announced: do not reuse
			}
			if _, err = fw.Write(buf[:have]); err == nil {
				left -= int64(have)
				_, err = io.CopyBuffer(fw, io.LimitReader(u.c, left), buf)
			}
		} else {
			if _, err = fw.Write(buf[:have]); err == nil {
				_, err = io.CopyBuffer(fw, u.c, buf)
			}
			return errHeadersSent // the engine closes: never reused
		}
		if err != nil {
			return errHeadersSent
		}
		ok = true
		return nil
	}

	var dc dechunker
	out := func(b []byte) error { _, err := w.Write(b); return err }
	// feed relays one read's bytes and flushes them; done once the last
	// chunk and its trailers are in.
	feed := func(b []byte) (done bool, err error) {
		rest, err := dc.feed(b, out)
		if err != nil {
			return false, err
		}
		if dc.done() {
			if len(rest) > 0 {
				return true, errors.New("bytes after the response")
			}
			return true, w.Flush()
		}
		return false, w.Flush()
	}
	if have > 0 {
		done, err := feed(buf[:have])
		if err != nil {
			return errHeadersSent
		}
		if done {
			ok = true
			return nil
		}
	}
	if !p.edge {
		for {
			n, err := u.c.Read(buf)
			if err != nil {
				return errHeadersSent
			}
			done, err := feed(buf[:n])
			if err != nil {
				return errHeadersSent
			}
			if done {
				ok = true
				return nil
			}
		}
	}
	var cbErr error
	done := false
	err = u.rc.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.Read(int(fd), buf)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return false
			case err != nil:
				cbErr = err
				return true
			case n == 0:
				cbErr = io.ErrUnexpectedEOF
				return true
			}
			if done, cbErr = feed(buf[:n]); done || cbErr != nil {
				return true
			}
			if n < len(buf) {
				// A short read drained the socket: wait for the next
				// arrival without an EAGAIN read.
				return false
			}
		}
	})
	if err != nil || cbErr != nil || !done {
		return errHeadersSent
	}
	ok = true
	return nil
}

type flushWriter struct{ w sink }

func (f flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if err == nil {
		err = f.w.Flush()
	}
	return n, err
}

// rawHead is what the relay needs of a response head.
type rawHead struct {
	status  int
	chunked bool
	length  int64 // -1: none
}

// parseHead parses a status line and header lines (each ending in CRLF),
// copying end-to-end headers into dst.
func parseHead(b []byte, dst http.Header) (rawHead, error) {
	h := rawHead{length: -1}
	line, b, _ := bytes.Cut(b, []byte("\r\n"))
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return h, fmt.Errorf("bad status line %q", line)
	}
	st, err := strconv.Atoi(string(line[9:12]))
	if err != nil || st < 100 {
		return h, fmt.Errorf("bad status line %q", line)
	}
	h.status = st
	for len(b) > 0 {
		line, b, _ = bytes.Cut(b, []byte("\r\n"))
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return h, fmt.Errorf("bad header line %q", line)
		}
		key := http.CanonicalHeaderKey(string(bytes.TrimSpace(k)))
		val := string(bytes.TrimSpace(v))
		switch key {
		case "Transfer-Encoding":
			h.chunked = val == "chunked"
			if !h.chunked {
				return h, fmt.Errorf("unsupported transfer encoding %q", val)
			}
			continue
		case "Content-Length":
			if h.length, err = strconv.ParseInt(val, 10, 64); err != nil || h.length < 0 {
				return h, fmt.Errorf("bad content length %q", val)
			}
			continue
		}
		if !rawHop[key] {
			dst[key] = append(dst[key], val)
		}
	}
	if h.chunked {
		h.length = -1
	}
	return h, nil
}

// dechunker decodes an HTTP/1.1 chunked body fed in pieces of any size.
type dechunker struct {
	state int   // dcSize, dcData, dcDataEnd, dcTrailer, dcDone
	left  int64 // data bytes left in the current chunk; CRLF bytes left in dcDataEnd
	line  []byte
}

const (
	dcSize = iota
	dcData
	dcDataEnd
	dcTrailer
	dcDone
)

func (d *dechunker) done() bool { return d.state == dcDone }

// feed decodes p, passing each piece of chunk data to out, and returns
// what follows the body's end (nothing, for a well-behaved engine).
func (d *dechunker) feed(p []byte, out func([]byte) error) ([]byte, error) {
	for len(p) > 0 && d.state != dcDone {
		switch d.state {
		case dcSize, dcTrailer:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				if len(d.line)+len(p) > 4096 {
					return nil, errors.New("chunk line too long")
				}
				d.line = append(d.line, p...)
				return nil, nil
			}
			line := p[:i]
			if len(d.line) > 0 {
				line = append(d.line, line...)
				d.line = d.line[:0]
			}
			p = p[i+1:]
			line = bytes.TrimSuffix(line, []byte("\r"))
			if d.state == dcTrailer {
				if len(line) == 0 {
					d.state = dcDone
				}
				continue
			}
			if j := bytes.IndexByte(line, ';'); j >= 0 {
				line = line[:j]
			}
			n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("bad chunk size %q", line)
			}
			if n == 0 {
				d.state = dcTrailer
			} else {
				d.state, d.left = dcData, n
			}
		case dcData:
			n := min(int64(len(p)), d.left)
			if err := out(p[:n]); err != nil {
				return nil, err
			}
			p, d.left = p[n:], d.left-n
			if d.left == 0 {
				d.state, d.left = dcDataEnd, 2
			}
		case dcDataEnd:
			want := "\r\n"[2-d.left:]
			n := min(len(p), len(want))
			if string(p[:n]) != want[:n] {
				return nil, errors.New("chunk data not followed by CRLF")
			}
			p, d.left = p[n:], d.left-int64(n)
			if d.left == 0 {
				d.state = dcSize
			}
		}
	}
	return p, nil
}
