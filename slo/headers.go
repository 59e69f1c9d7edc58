package slo

import (
	"fmt"
	"net/http"
	"time"
)

// HeaderMode says whether a request's x-slo-*-ms headers may move its
// targets, and which way.
type HeaderMode uint8

// Header modes.
const (
	// HeadersAny: a header may tighten or loosen each bound ("0" removes
	// it), down to the policy's floor.
	HeadersAny HeaderMode = iota
	// HeadersTighten: a header may only tighten a bound (down to the
	// floor); a looser value, or "0" where the operator set a bound, is
	// ignored.
	HeadersTighten
	// HeadersOff: headers are ignored; every request has the operator's
	// targets.
	HeadersOff
)

// ParseHeaderMode reads "any", "tighten" or "off".
func ParseHeaderMode(s string) (HeaderMode, error) {
	switch s {
	case "any":
		return HeadersAny, nil
	case "tighten":
		return HeadersTighten, nil
	case "off":
		return HeadersOff, nil
	}
	return 0, fmt.Errorf("%q is not any, tighten or off", s)
}

// String returns the mode's name.
func (m HeaderMode) String() string {
	return [...]string{"any", "tighten", "off"}[min(int(m), 2)]
}

// HeaderPolicy bounds what a request's headers may do to its targets: the
// operator owns them. A header's bound below Floor is raised to Floor, so
// that no client can declare a class of targets the engine cannot meet and
// have the controller chase it; "0" ("no bound") stays no bound where the
// mode allows loosening.
type HeaderPolicy struct {
	Mode  HeaderMode
	Floor Targets
}

// Apply returns t with the overrides of h that the policy allows. A
// malformed value is an error naming the header (also when the mode would
// ignore it: the client is told), with t unchanged.
func (p HeaderPolicy) Apply(t Targets, h http.Header) (Targets, error) {
	asked, err := t.WithHeaders(h)
	if err != nil || p.Mode == HeadersOff {
		return t, err
	}
	out := t
	for _, b := range [...]struct {
		dst          *time.Duration
		base, wanted time.Duration
		floor        time.Duration
	}{
		{&out.TTFT, t.TTFT, asked.TTFT, p.Floor.TTFT},
		{&out.TPOT, t.TPOT, asked.TPOT, p.Floor.TPOT},
		{&out.E2E, t.E2E, asked.E2E, p.Floor.E2E},
	} {
		if b.wanted == b.base {
			continue // no header, or the operator's own value
		}
		if b.wanted > 0 {
			b.wanted = max(b.wanted, b.floor)
		}
		looser := b.wanted == 0 || (b.base > 0 && b.wanted > b.base)
		if p.Mode == HeadersTighten && looser {
			continue
		}
		*b.dst = b.wanted
	}
	return out, nil
}
