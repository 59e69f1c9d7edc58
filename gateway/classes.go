package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kneecap/kneecap/admission"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
)

// ClassSpec is one priority class as KNEECAP_CLASSES sets it.
type ClassSpec struct {
	Name string
	// Targets replace the operator's targets for the class's requests,
	// field by field where Set says so; a zero target is no bound.
	Targets slo.Targets
	Set     struct{ TTFT, TPOT, E2E bool }
	// QueueShare is the share of KNEECAP_MAX_QUEUE its waiters may take
	// (0 means all of it).
	QueueShare float64
	// MaxWait bounds the time its requests may wait in the queue, in place
	// of KNEECAP_MAX_QUEUE_WAIT; 0 means not set.
	MaxWait time.Duration
}

// TenantSpec is one tenant as KNEECAP_TENANTS sets it.
type TenantSpec struct {
	Name   string
	Weight float64 // 0 means 1
	Class  string  // the class of its requests without a class header; "" the default class
}

// maxLabel bounds a class or tenant name, from the configuration or from
// a header.
const maxLabel = 64

// validLabel reports whether s may name a class or tenant: 1-64 bytes of
// letters, digits and -_.:
func validLabel(s string) bool {
	if s == "" || len(s) > maxLabel {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == ':'
		if !ok {
			return false
		}
	}
	return true
}

// ParseClasses parses KNEECAP_CLASSES: classes separated by ";", highest
// priority first, each "name" or "name:key=value,...". Keys: ttft, tpot,
// e2e (durations; 0 is no bound; an absent key keeps the operator's
// target), queue (the class's share of the queue, in (0, 1]) and wait
// (the class's bound on a request's time in the queue, at most 24h, in
// place of KNEECAP_MAX_QUEUE_WAIT; 0 or absent is not set).
//
//	interactive:ttft=1s,tpot=100ms;batch:ttft=0,tpot=0,e2e=30m,queue=0.5,wait=5m
func ParseClasses(s string) ([]ClassSpec, error) {
	var out []ClassSpec
	seen := map[string]bool{}
	err := eachEntry(s, 16, "classes", func(part string) error {
		name, opts, _ := strings.Cut(part, ":")
		c := ClassSpec{Name: strings.TrimSpace(name)}
		if !validLabel(c.Name) {
			return fmt.Errorf("class name %q: want 1-%d letters, digits or -_.:", c.Name, maxLabel)
		}
		if seen[c.Name] {
			return fmt.Errorf("class %q named twice", c.Name)
		}
		seen[c.Name] = true
		out = append(out, c)
		return eachOption(opts, func(k, v string) error {
			c := &out[len(out)-1]
			switch k {
			case "ttft", "tpot", "e2e":
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 || d > 24*time.Hour {
					return fmt.Errorf("class %q: %s=%q: want a duration between 0 and 24h", c.Name, k, v)
				}
				switch k {
				case "ttft":
					c.Targets.TTFT, c.Set.TTFT = d, true
				case "tpot":
					c.Targets.TPOT, c.Set.TPOT = d, true
				default:
					c.Targets.E2E, c.Set.E2E = d, true
				}
			case "queue":
				f, ok := parsePositive(v, 1)
				if !ok {
					return fmt.Errorf("class %q: queue=%q: want a share in (0, 1]", c.Name, v)
				}
				c.QueueShare = f
			case "wait":
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 || d > 24*time.Hour {
					return fmt.Errorf("class %q: wait=%q: want a duration between 0 and 24h", c.Name, v)
				}
				c.MaxWait = d
			default:
				return fmt.Errorf("class %q: unknown key %q (want ttft, tpot, e2e, queue, wait)", c.Name, k)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ParseTenants parses KNEECAP_TENANTS: tenants separated by ";", each
// "name:key=value,...". Keys: weight (> 0, at most 1000) and class (the
// class of its requests that name none). A tenant known by API key is
// named by its hash ("key:" and the first 16 hex digits of the key's
// SHA-256).
//
//	team-a:weight=2;team-b;team-c:weight=0.5,class=batch
func ParseTenants(s string) ([]TenantSpec, error) {
	var out []TenantSpec
	seen := map[string]bool{}
	err := eachEntry(s, 10000, "tenants", func(part string) error {
		name, opts, _ := strings.Cut(part, ":")
		if strings.HasPrefix(part, "key:") { // a hashed key's name holds a colon
			k, rest, _ := strings.Cut(part[len("key:"):], ":")
			name, opts = "key:"+k, rest
		}
		t := TenantSpec{Name: strings.TrimSpace(name)}
		if !validLabel(t.Name) || seen[t.Name] {
			return fmt.Errorf("tenant name %q: want 1-%d letters, digits or -_.:, each once", t.Name, maxLabel)
		}
		seen[t.Name] = true
		out = append(out, t)
		return eachOption(opts, func(k, v string) error {
			t := &out[len(out)-1]
			switch k {
			case "weight":
				f, ok := parsePositive(v, 1000)
				if !ok {
					return fmt.Errorf("tenant %q: weight=%q: want a number in (0, 1000]", t.Name, v)
				}
				t.Weight = f
			case "class":
				t.Class = v
			default:
				return fmt.Errorf("tenant %q: unknown key %q (want weight, class)", t.Name, k)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachEntry calls f for each non-empty entry of a ";"-separated list, and
// refuses more than most of them (what names them in the error).
func eachEntry(s string, most int, what string, f func(entry string) error) error {
	n := 0
	for part := range strings.SplitSeq(s, ";") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		if n++; n > most {
			return fmt.Errorf("at most %d %s", most, what)
		}
		if err := f(part); err != nil {
			return err
		}
	}
	return nil
}

// parsePositive parses a number in (0, most].
func parsePositive(v string, most float64) (float64, bool) {
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil && f > 0 && f <= most
}

// eachOption calls f for each "key=value" of a comma-separated list.
func eachOption(opts string, f func(k, v string) error) error {
	for kv := range strings.SplitSeq(opts, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%q: want key=value", kv)
		}
		if err := f(strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)); err != nil {
			return err
		}
	}
	return nil
}

// classes is the gateway's classification of requests: what
// KNEECAP_CLASSES, KNEECAP_DEFAULT_CLASS, KNEECAP_TENANTS and the header
// names say. It is immutable once built.
type classes struct {
	specs        []ClassSpec
	resolved     []proxy.Class // per class: its targets over the operator's, its wait (no tenant)
	index        map[string]int
	def          int
	classHeader  string
	tenantHeader string // "" means the API key
	tenants      map[string]TenantSpec
	op           slo.Targets
}

// newClasses builds the classification from a validated Config.
func newClasses(cfg Config) *classes {
	specs, _ := ParseClasses(cfg.Classes)
	tenants, _ := ParseTenants(cfg.Tenants)
	c := &classes{
		specs: specs, index: map[string]int{}, classHeader: cfg.ClassHeader,
		tenantHeader: cfg.TenantHeader, tenants: map[string]TenantSpec{}, op: cfg.Targets(),
	}
	if len(c.specs) == 0 {
		c.specs = []ClassSpec{{Name: "default"}}
	}
	for i, s := range c.specs {
		c.index[s.Name] = i
		c.resolved = append(c.resolved, resolveClass(i, s, c.op))
	}
	c.def = len(c.specs) - 1 // unset: the lowest, never the highest
	if i, ok := c.index[cfg.DefaultClass]; ok {
		c.def = i
	}
	for _, t := range tenants {
		c.tenants[t.Name] = t
	}
	return c
}

// limiterClasses are the classes as the limiter takes them.
func (c *classes) limiterClasses() []admission.ClassConfig {
	out := make([]admission.ClassConfig, len(c.specs))
	for i, s := range c.specs {
		out[i] = admission.ClassConfig{Name: s.Name, QueueShare: s.QueueShare}
	}
	return out
}

// weight is a tenant's configured weight (1 when unnamed).
func (c *classes) weight(tenant string) float64 {
	if t, ok := c.tenants[tenant]; ok && t.Weight > 0 {
		return t.Weight
	}
	return 1
}

// classify implements proxy.Classifier. The tenant is the tenant header's
// value when one is configured and sent, or else a hash of the bearer
// key: the key itself goes nowhere. The class is the class header's value
// when it names a class, else the tenant's class, else the default class.
func (c *classes) classify(h http.Header) (proxy.Class, error) {
	tenant, err := c.tenantOf(h)
	if err != nil {
		return proxy.Class{}, err
	}
	i := c.def
	if t, ok := c.tenants[tenant]; ok {
		if j, ok := c.index[t.Class]; ok {
			i = j
		}
	}
	if v := h.Get(c.classHeader); c.classHeader != "" && v != "" {
		if j, ok := c.index[v]; ok {
			i = j
		}
	}
	pc := c.resolved[i]
	pc.Tenant = tenant
	return pc, nil
}

// resolveClass is what a request of class i (spec s) is given, whoever
// sends it: the class's targets over the operator's op, field by field
// where the class sets them, and its queue-wait bound.
func resolveClass(i int, s ClassSpec, op slo.Targets) proxy.Class {
	pc := proxy.Class{Index: i, Name: s.Name, MaxWait: s.MaxWait}
	if s.Set.TTFT || s.Set.TPOT || s.Set.E2E {
		pc.Targets, pc.HasTargets = op, true
		if s.Set.TTFT {
			pc.Targets.TTFT = s.Targets.TTFT
		}
		if s.Set.TPOT {
			pc.Targets.TPOT = s.Targets.TPOT
		}
		if s.Set.E2E {
			pc.Targets.E2E = s.Targets.E2E
		}
	}
	return pc
}

// tenantOf names a request's tenant: a hostile header is bounded (1-64
// bytes of letters, digits and -_.:) or refused.
func (c *classes) tenantOf(h http.Header) (string, error) {
	if c.tenantHeader != "" {
		if v := h.Get(c.tenantHeader); v != "" {
			if !validLabel(v) || strings.HasPrefix(v, "key:") {
				return "", fmt.Errorf("header %s: want 1-%d letters, digits or -_.: (not starting with key:)", c.tenantHeader, maxLabel)
			}
			return v, nil
		}
	}
	return KeyTenant(h.Get("Authorization")), nil
}

// KeyTenant names the tenant of an Authorization header: "key:" and the
// first 16 hex digits of the SHA-256 of its bearer token, or "" without
// one. The key itself is never kept.
func KeyTenant(authorization string) string {
	scheme, key, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(key)))
	return "key:" + hex.EncodeToString(sum[:8])
}
