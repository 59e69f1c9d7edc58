package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kneecap/kneecap/reqlog"
)

// prefixBlockTokens is the block of the request log's prefix fingerprint,
// in tokens: Mooncake's traces hash their prompts in blocks of 512, so a
// log and such a trace read alike.
const prefixBlockTokens = 512

// newRequestLog builds the request log when Config.RequestLog names a
// file, registers its counters, and returns the block size the proxy
// fingerprints prompts in (0 without a log: the proxy then computes
// nothing).
func (g *Gateway) newRequestLog() (int, error) {
	if g.cfg.RequestLog == "" {
		return 0, nil
	}
	l, err := reqlog.New(reqlog.Config{
		Path: g.cfg.RequestLog, MaxBytes: g.cfg.RequestLogMaxBytes, Files: g.cfg.RequestLogFiles,
		Buffer: g.cfg.RequestLogBuffer, Logger: g.log,
	})
	if err != nil {
		return 0, &SettingError{Var: varOf("RequestLog"), Err: err}
	}
	g.reqlog = l
	for result, n := range map[string]func() uint64{"written": l.Written, "dropped": l.Dropped, "failed": l.Failed} {
		g.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "kneecap_request_log_lines_total",
			Help:        "Finished generation requests the request log wrote (written), dropped because its queue was full (dropped), or lost to a write error or their length (failed).",
			ConstLabels: prometheus.Labels{"result": result},
		}, func() float64 { return float64(n()) }))
	}
	return prefixBlockTokens, nil
}

// RequestLog returns the request log (nil when KNEECAP_REQUEST_LOG is
// unset). Run runs its writer; a caller that serves Handler without Run
// (a benchmark) runs it itself.
func (g *Gateway) RequestLog() *reqlog.Log { return g.reqlog }
