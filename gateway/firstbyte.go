package gateway

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A connection a client opens ahead of need waits for its first request as
// a kept-alive connection waits for its next: for the idle timeout, with
// the header timeout running from the request's first byte.
//
// net/http arms ReadHeaderTimeout when it accepts a connection, so one that
// carries no request for that long is closed: 10 s by default. Clients open
// such connections all the time: Go's transport keeps in its pool the
// connection it dialed for a request that another connection, freed first,
// went out on; Envoy and browsers preconnect. Closed at the header timeout,
// the connection races the client's reuse, and a request sent on it as the
// gateway closes it is lost with "connection reset by peer" (a POST is not
// retried by the client). For the connection's next requests net/http waits
// for the first byte before it arms the header timeout; firstByteListener
// does the same for the first.
//
// The bound on what a silent client holds is the idle timeout, as for any
// kept-alive connection, and one that starts a request and stalls is cut at
// the header timeout as before.

// firstByteListener wraps each accepted connection in a firstByteConn.
type firstByteListener struct {
	net.Listener
	idle time.Duration // how long a connection may wait for its first byte; 0: no bound
}

// listenFirstByte makes ln's connections wait idle for their first byte:
// the server's IdleTimeout, or its ReadTimeout when that is zero, as
// net/http waits for a kept-alive connection's next request.
func listenFirstByte(ln net.Listener, idle, read time.Duration) net.Listener {
	if idle == 0 {
		idle = read
	}
	return &firstByteListener{Listener: ln, idle: max(idle, 0)}
}

func (l *firstByteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	fc := &firstByteConn{Conn: c, idle: l.idle}
	fc.waiting.Store(true)
	return fc, nil
}

// firstByteConn defers the read deadline net/http sets before a
// connection's first byte: until that byte it waits idle, then the deadline
// runs for the time net/http asked, from the byte.
type firstByteConn struct {
	net.Conn
	idle time.Duration

	// waiting is true until the first byte is read; read without mu by
	// every Read (one atomic load after the first), changed under it.
	waiting  atomic.Bool
	mu       sync.Mutex
	deferred time.Duration // the deadline asked for while waiting, from when it was asked; 0: none
}

// SetReadDeadline defers t while the connection waits for its first byte.
func (c *firstByteConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.waiting.Load() {
		return c.Conn.SetReadDeadline(t)
	}
	c.deferred = 0
	if !t.IsZero() {
		c.deferred = max(time.Until(t), time.Nanosecond)
	}
	var idle time.Time
	if c.idle > 0 {
		idle = time.Now().Add(c.idle)
	}
	return c.Conn.SetReadDeadline(idle)
}

// Read arms the deferred deadline once the first byte has arrived.
func (c *firstByteConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.waiting.Load() {
		c.mu.Lock()
		if c.waiting.Load() {
			c.waiting.Store(false)
			var dl time.Time
			if c.deferred > 0 {
				dl = time.Now().Add(c.deferred)
			}
			if derr := c.Conn.SetReadDeadline(dl); derr != nil && err == nil {
				err = derr
			}
		}
		c.mu.Unlock()
	}
	return n, err
}

// CloseWrite half-closes a TCP connection, as net/http does before it
// closes one whose request body it stopped reading.
func (c *firstByteConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
