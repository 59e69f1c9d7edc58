package proxytest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
)

// PipeListener is a net.Listener whose connections are in-memory net.Pipe
// pairs, so that an HTTP client and server can talk inside a
// testing/synctest bubble (where time is virtual and real sockets would
// block the bubble). Dial it with DialContext or through Transport.
type PipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewPipeListener returns an open listener.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// Accept implements net.Listener.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *PipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *PipeListener) Addr() net.Addr { return pipeAddr{} }

// DialContext connects to the listener, whatever the address.
func (l *PipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, errors.New("proxytest: pipe listener closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Transport returns an HTTP transport whose every connection dials l.
// Close its idle connections when done.
func (l *PipeListener) Transport() *http.Transport {
	return &http.Transport{DialContext: l.DialContext, MaxIdleConnsPerHost: 1024, DisableCompression: true}
}
