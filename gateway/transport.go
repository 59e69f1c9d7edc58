package gateway

import (
	"net"
	"net/http"
	"time"
)

// newTransport returns the transport to the engine: keep-alive connections
// enough for every running stream (the default of 2 idle per host would
// reconnect constantly), each kept idle for less than the engine's own
// keep-alive (idle; 0 means none is kept), no compression (the relay reads
// the bytes), no response-header timeout (FirstTokenTimeout and
// ResponseTimeout bound the wait instead).
func newTransport(idle time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 nil, // the engine is local; never via HTTP_PROXY
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   4096,
		IdleConnTimeout:       idle,
		DisableKeepAlives:     idle == 0,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
		// Read and write buffers stay at 4 KiB: the event reader buffers
		// the stream itself, and every running stream holds one of each.
	}
}
