package scenarios

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// pipeListener is a net.Listener whose connections are net.Pipe ends, so a
// server and its clients can run in one testing/synctest bubble in virtual
// time: every read and write blocks on channels the bubble owns.
type pipeListener struct {
	name   string
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener(name string) *pipeListener {
	return &pipeListener{name: name, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept returns the server end of the next dialled pipe.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.name) }

// DialContext hands the server end of a new pipe to Accept and returns the
// client end.
func (l *pipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	case <-l.closed:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	}
}

// transport returns an HTTP/1.1 transport that dials this listener. It
// keeps enough idle connections for every concurrent user, so that a run
// does not spend its time opening pipes.
func (l *pipeListener) transport() *http.Transport {
	return &http.Transport{
		DialContext:           l.DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   4096,
		IdleConnTimeout:       time.Hour,
		DisableCompression:    true,
		ResponseHeaderTimeout: 0,
	}
}

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

// endpoint is where one server of a run listens: a net.Pipe listener in
// virtual time, or a TCP listener on 127.0.0.1 in real time.
type endpoint struct {
	ln   net.Listener
	host string // for URLs
	tr   *http.Transport
}

// newEndpoint opens an endpoint; real selects TCP on 127.0.0.1.
func newEndpoint(name string, real bool) (*endpoint, error) {
	if !real {
		l := newPipeListener(name)
		return &endpoint{ln: l, host: name, tr: l.transport()}, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &endpoint{ln: l, host: l.Addr().String(), tr: tr}, nil
}
