package proxy

import (
	"hash/maphash"
	"net/http"
	"strconv"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/slo"
)

// Class is what a request's headers say of its place in admission: its
// priority class and tenant, and the targets its class sets.
type Class struct {
	// Index is the class's place in the limiter's classes (0 the highest
	// priority); Name labels it in records and metrics.
	Index int
	Name  string
	// Tenant names the tenant whose fair share the request counts to: a
	// bounded label, never a secret (an API key is hashed before it gets
	// here). "" is the anonymous tenant.
	Tenant string
	// Targets, when HasTargets, replace the operator's targets as the base
	// that x-slo-*-ms headers adjust; a zero field is no bound (a batch
	// class may have none).
	Targets    slo.Targets
	HasTargets bool
	// MaxWait, when positive, bounds the request's time in the limiter's
	// queue in place of Config.MaxQueueWait (see Proxy.maxWait).
	MaxWait time.Duration
}

// Classifier gives a request its Class from its headers. An error is the
// client's fault (a malformed tenant header, say): 400 with its message.
type Classifier func(h http.Header) (Class, error)

// admissionOf resolves a request's class and targets and builds what the
// limiter is asked; it also fills the record's class and tenant. An error
// is a bad header, answered 400. The class comes back with it (see
// notStreamed).
func (p *Proxy) admissionOf(r *http.Request, rec *slo.Record) (admission.Request, Class, error) {
	base := p.cfg.Targets
	var c Class
	if p.cfg.Classify != nil {
		var err error
		if c, err = p.cfg.Classify(r.Header); err != nil {
			return admission.Request{}, c, badHeader(err)
		}
		if c.HasTargets {
			base = c.Targets
		}
	}
	targets, err := p.cfg.Headers.Apply(base, r.Header)
	if err != nil {
		return admission.Request{}, c, badHeader(err)
	}
	rec.Targets, rec.Class, rec.Tenant = targets, c.Name, c.Tenant
	return admission.Request{
		Arrival: rec.Arrival, Targets: targets, MaxWait: p.maxWait(c, targets),
		Class: c.Index, Tenant: c.Tenant, Retries: retriesOf(r.Header),
	}, c, nil
}

// retriesOf is the client's count of its earlier attempts of a request,
// as the OpenAI SDKs send it (X-Stainless-Retry-Count); -1 when it does
// not say or says something else than a small count.
func retriesOf(h http.Header) int {
	v := h.Get("X-Stainless-Retry-Count")
	if v == "" || len(v) > 4 {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// fingerprintSeed keys the fingerprints of one process.
var fingerprintSeed = maphash.MakeSeed()

// fingerprint identifies a request its client may send again after a
// refusal (admission.Request.Fingerprint): its route, tenant and body as
// the client sent them. It is never 0.
func fingerprint(route, tenant string, body []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	h.WriteString(route)
	h.WriteByte(0)
	h.WriteString(tenant)
	h.WriteByte(0)
	h.Write(body)
	return h.Sum64() | 1
}

// notStreamed makes areq that of a request whose client does not stream:
// the client feels only the end of its answer, so it queues and is
// checked for its deadline by the targets its verdict uses
// (slo.Targets.Verdict: its E2E target alone when it has one), and its
// queue-wait bound follows from them (see maxWait).
func (p *Proxy) notStreamed(areq *admission.Request, c Class) {
	areq.Targets = areq.Targets.Verdict(false)
	areq.MaxWait = p.maxWait(c, areq.Targets)
}
