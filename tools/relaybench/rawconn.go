package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
)

// serveConns is the hand-written server of target rawconn: HTTP/1.1 keep-alive
// connections, each served by one goroutine that reads a request with
// http.ReadRequest, relays it and writes the response itself (connSink), so
// that nothing of net/http runs per chunk. It does not watch an idle
// client: a client that leaves mid-stream is noticed at the next write.
func (p *rawProxy) serveConns(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go p.serveConn(c)
	}
}

func (p *rawProxy) serveConn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4<<10)
	s := &connSink{c: c, hdr: http.Header{}}
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
		if err != nil {
			return
		}
		clear(s.hdr)
		s.started = false
		err = p.relay(s, req, body)
		switch {
		case err == nil:
			if s.end() != nil {
				return
			}
		case !s.started:
			s.hdr.Set("Content-Type", "text/plain")
			s.WriteHeader(http.StatusBadGateway)
			s.Write([]byte("the engine could not be reached\n"))
			if s.end() != nil {
				return
			}
		default:
			return // broken after the headers: close, the client sees it
		}
	}
}

// connSink writes a chunked HTTP/1.1 response on a raw connection: the head
// on the first flush, then one chunk per flush, each in one write.
type connSink struct {
	c       net.Conn
	hdr     http.Header
	status  int
	started bool   // the head is written (or buffered in out)
	out     []byte // the bytes of the next write
	data    []byte // chunk data waiting for a flush
}

func (s *connSink) Header() http.Header { return s.hdr }

func (s *connSink) WriteHeader(status int) {
	s.status, s.started = status, true
	s.out = append(s.out[:0], "HTTP/1.1 "...)
	s.out = strconv.AppendInt(s.out, int64(status), 10)
	s.out = append(s.out, ' ')
	s.out = append(s.out, http.StatusText(status)...)
	s.out = append(s.out, "\r\n"...)
	for k, vv := range s.hdr {
		for _, v := range vv {
			s.out = append(s.out, k...)
			s.out = append(s.out, ": "...)
			s.out = append(s.out, v...)
			s.out = append(s.out, "\r\n"...)
		}
	}
	s.out = append(s.out, "Transfer-Encoding: chunked\r\n\r\n"...)
}

func (s *connSink) Write(b []byte) (int, error) {
	s.data = append(s.data, b...)
	return len(b), nil
}

func (s *connSink) Flush() error {
	if len(s.data) > 0 {
		s.out = strconv.AppendInt(s.out, int64(len(s.data)), 16)
		s.out = append(s.out, "\r\n"...)
		s.out = append(s.out, s.data...)
		s.out = append(s.out, "\r\n"...)
		s.data = s.data[:0]
	}
	if len(s.out) == 0 {
		return nil
	}
	_, err := s.c.Write(s.out)
	s.out = s.out[:0]
	return err
}

// end finishes the response: the last chunk.
func (s *connSink) end() error {
	if err := s.Flush(); err != nil {
		return err
	}
	s.out = append(s.out, "0\r\n\r\n"...)
	return s.Flush()
}
