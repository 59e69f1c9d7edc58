package gateway

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/kneecap/kneecap/admission/control"
	"github.com/kneecap/kneecap/eppmetrics"
	"github.com/kneecap/kneecap/proxy"
	"github.com/kneecap/kneecap/slo"
)

// Validate checks values that parse but make no sense. Its errors are
// *SettingError.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &SettingError{Var: varOf(field), Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.Upstream == nil || c.Upstream.Host == "" || (c.Upstream.Scheme != "http" && c.Upstream.Scheme != "https"):
		return bad("Upstream", "must be an absolute http(s) URL such as http://127.0.0.1:8000")
	case c.SLOTTFT < 0:
		return bad("SLOTTFT", "must not be negative")
	case c.SLOTTFT > 24*time.Hour:
		return bad("SLOTTFT", "must be at most 24h, the most an x-slo-ttft-ms header may set")
	case c.SLOTPOT < 0:
		return bad("SLOTPOT", "must not be negative")
	case c.SLOTPOT > 24*time.Hour:
		return bad("SLOTPOT", "must be at most 24h, the most an x-slo-tpot-ms header may set")
	case c.SLOE2E < 0:
		return bad("SLOE2E", "must not be negative")
	case c.SLOE2E > 24*time.Hour:
		return bad("SLOE2E", "must be at most 24h, the most an x-slo-e2e-ms header may set")
	case c.SLOWindow < time.Second:
		return bad("SLOWindow", "must be at least 1s")
	case c.SLOWindow > 24*time.Hour:
		return bad("SLOWindow", "must be at most 24h")
	case c.MaxConcurrency < 0:
		return bad("MaxConcurrency", "must not be negative")
	case c.MaxConcurrency > control.CapLimit:
		return bad("MaxConcurrency", "must be at most %d, four times the largest default of vLLM's max_num_seqs (1024)", control.CapLimit)
	case !(c.SLOPercentile > 0 && c.SLOPercentile < 1):
		return bad("SLOPercentile", "must be between 0 and 1 (exclusive), e.g. 0.9")
	case c.MinCap < 1:
		return bad("MinCap", "must be at least 1")
	case c.MaxCap != 0 && c.MaxCap < c.MinCap:
		return bad("MaxCap", "must be 0 (unset) or at least KNEECAP_MIN_CAP (%d)", c.MinCap)
	case c.MaxCap > control.CapLimit:
		return bad("MaxCap", "must be at most %d, four times the largest default of vLLM's max_num_seqs (1024)", control.CapLimit)
	case c.MinCap > control.CapLimit:
		return bad("MinCap", "must be at most %d (the highest KNEECAP_MAX_CAP)", control.CapLimit)
	case c.StateMaxAge < 0:
		return bad("StateMaxAge", "must not be negative (0: a state file of any age)")
	case c.StateFile != "" && strings.ContainsRune(c.StateFile, 0):
		return bad("StateFile", "must be a file path")
	case c.InitialCap < 0:
		return bad("InitialCap", "must not be negative (0: KNEECAP_MIN_CAP)")
	case c.MaxModelLen < 0 || c.MaxModelLen > 1<<30:
		return bad("MaxModelLen", "must be between 0 (no check) and 1073741824 tokens")
	case c.InitialCap > 0 && c.InitialCap < c.MinCap:
		return bad("InitialCap", "must be 0 (unset) or at least KNEECAP_MIN_CAP (%d)", c.MinCap)
	case c.InitialCap > 0 && c.MaxCap > 0 && c.InitialCap > c.MaxCap:
		return bad("InitialCap", "must be at most KNEECAP_MAX_CAP (%d)", c.MaxCap)
	case c.InitialCap > control.CapLimit:
		return bad("InitialCap", "must be at most %d (the highest KNEECAP_MAX_CAP)", control.CapLimit)
	case c.MaxQueue < 0:
		return bad("MaxQueue", "must not be negative")
	case c.MaxQueue > 1<<20:
		return bad("MaxQueue", "must be at most 1048576 (2^20)")
	case c.MaxQueueWait < 0:
		return bad("MaxQueueWait", "must not be negative")
	case c.MaxQueueWait > 24*time.Hour:
		return bad("MaxQueueWait", "must be at most 24h")
	case c.MaxRetryAfter < 0 || c.MaxRetryAfter > 24*time.Hour:
		return bad("MaxRetryAfter", "must be between 0 (no bound) and 24h")
	case c.FirstTokenTimeout < 0:
		return bad("FirstTokenTimeout", "must not be negative")
	case c.FirstTokenTimeout > 24*time.Hour:
		return bad("FirstTokenTimeout", "must be at most 24h")
	case c.ResponseTimeout < 0:
		return bad("ResponseTimeout", "must not be negative")
	case c.ResponseTimeout > 24*time.Hour:
		return bad("ResponseTimeout", "must be at most 24h")
	case c.StreamIdleTimeout < 0:
		return bad("StreamIdleTimeout", "must not be negative")
	case c.StreamIdleTimeout > 24*time.Hour:
		return bad("StreamIdleTimeout", "must be at most 24h")
	case c.ClientWriteTimeout < 0:
		return bad("ClientWriteTimeout", "must not be negative")
	case c.ClientWriteTimeout > 24*time.Hour:
		return bad("ClientWriteTimeout", "must be at most 24h")
	case c.UpstreamIdleTimeout < 0:
		return bad("UpstreamIdleTimeout", "must not be negative")
	case c.UpstreamIdleTimeout > 24*time.Hour:
		return bad("UpstreamIdleTimeout", "must be at most 24h")
	case c.ClientHeaderTimeout < 0:
		return bad("ClientHeaderTimeout", "must not be negative")
	case c.ClientHeaderTimeout > 24*time.Hour:
		return bad("ClientHeaderTimeout", "must be at most 24h")
	case c.ClientReadTimeout < 0:
		return bad("ClientReadTimeout", "must not be negative")
	case c.ClientReadTimeout > 24*time.Hour:
		return bad("ClientReadTimeout", "must be at most 24h")
	case c.ClientIdleTimeout < 0:
		return bad("ClientIdleTimeout", "must not be negative")
	case c.ClientIdleTimeout > 24*time.Hour:
		return bad("ClientIdleTimeout", "must be at most 24h")
	case c.MaxBodyBytes <= 0:
		return bad("MaxBodyBytes", "must be positive")
	case c.MaxBodyBytes > 1<<30:
		return bad("MaxBodyBytes", "must be at most 1073741824 (1 GiB)")
	case c.MaxBodyBytesTotal != 0 && c.MaxBodyBytesTotal < c.MaxBodyBytes:
		return bad("MaxBodyBytesTotal", "must be at least KNEECAP_MAX_BODY_BYTES (%d)", c.MaxBodyBytes)
	case c.MaxBodyBytesTotal > 64<<30:
		return bad("MaxBodyBytesTotal", "must be at most 68719476736 (64 GiB)")
	case c.SLOHeaderFloorTTFT < 0 || c.SLOHeaderFloorTTFT > 24*time.Hour:
		return bad("SLOHeaderFloorTTFT", "must be between 0 and 24h")
	case c.SLOHeaderFloorTPOT < 0 || c.SLOHeaderFloorTPOT > 24*time.Hour:
		return bad("SLOHeaderFloorTPOT", "must be between 0 and 24h")
	case c.SLOHeaderFloorE2E < 0 || c.SLOHeaderFloorE2E > 24*time.Hour:
		return bad("SLOHeaderFloorE2E", "must be between 0 and 24h")
	case c.DrainTimeout < 0:
		return bad("DrainTimeout", "must not be negative")
	case c.DrainTimeout > 24*time.Hour:
		return bad("DrainTimeout", "must be at most 24h")
	case c.RefusalStatus != 0 && c.RefusalStatus != 429 && c.RefusalStatus != 503:
		return bad("RefusalStatus", "must be 429 or 503")
	case !strings.HasPrefix(c.UpstreamHealthPath, "/"):
		return bad("UpstreamHealthPath", "must start with /")
	case !validHeaderMode(c.SLOHeaders):
		return bad("SLOHeaders", "must be any, tighten or off")
	case !validPassthrough(c.PassthroughPaths):
		return bad("PassthroughPaths", "each must be a clean absolute path such as /v1/load_lora_adapter (a trailing * opens a prefix)")
	case c.LogFormat != "text" && c.LogFormat != "json":
		return bad("LogFormat", "must be text or json")
	}
	switch c.EPPMetrics {
	case "", "off", eppmetrics.VLLM.Family, eppmetrics.SGLang.Family:
	default:
		return bad("EPPMetrics", "must be off, vllm or sglang")
	}
	if c.EPPSaturatedWaiting < 0 || c.EPPSaturatedWaiting > 1_000_000 {
		return bad("EPPSaturatedWaiting", "must be between 0 and 1000000")
	}
	if err := c.validateEngineMetrics(bad); err != nil {
		return err
	}
	return c.validateClasses(bad)
}

// validateEngineMetrics checks the settings of the engine's metrics
// scrape.
func (c Config) validateEngineMetrics(bad func(field, format string, args ...any) error) error {
	switch s := c.EngineMetrics; {
	case s == "" || s == "off":
	case strings.HasPrefix(s, "/"):
		if u, err := url.Parse(s); err != nil || u.Scheme != "" || u.Host != "" || u.Fragment != "" {
			return bad("EngineMetrics", "must be off, a path on the upstream such as /metrics, or an absolute http(s) URL")
		}
	default:
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("EngineMetrics", "must be off, a path on the upstream such as /metrics, or an absolute http(s) URL")
		}
	}
	if d := c.EngineMetricsInterval; d != 0 && (d < 100*time.Millisecond || d > time.Hour) {
		return bad("EngineMetricsInterval", "must be between 100ms and 1h (0: 1s)")
	}
	return nil
}

// EngineMetricsURL returns the engine's metrics endpoint: EngineMetrics on
// the upstream, or as given when absolute; nil when off. EngineMetrics
// must have passed Validate.
func (c Config) EngineMetricsURL() *url.URL {
	s := c.EngineMetrics
	if s == "" || s == "off" {
		return nil
	}
	ref, err := url.Parse(s)
	if err != nil {
		return nil
	}
	if ref.IsAbs() {
		return ref
	}
	u := *c.Upstream
	u.Path, u.RawPath, u.RawQuery, u.Fragment = joinURLPath(u.Path, ref.Path), "", ref.RawQuery, ""
	return &u
}

// validateClasses checks the settings of classes and tenants.
func (c Config) validateClasses(bad func(field, format string, args ...any) error) error {
	classes, err := ParseClasses(c.Classes)
	if err != nil {
		return bad("Classes", "%v", err)
	}
	known := func(name string) bool {
		if len(classes) == 0 {
			return name == "default"
		}
		return slices.ContainsFunc(classes, func(s ClassSpec) bool { return s.Name == name })
	}
	tenants, err := ParseTenants(c.Tenants)
	switch {
	case c.DefaultClass != "" && !known(c.DefaultClass):
		return bad("DefaultClass", "must name a class of KNEECAP_CLASSES")
	case c.ClassHeader != "" && !validHeaderName(c.ClassHeader):
		return bad("ClassHeader", "must be empty (no class header) or an HTTP header name")
	case c.TenantHeader != "" && !validHeaderName(c.TenantHeader):
		return bad("TenantHeader", "must be empty (the API key) or an HTTP header name")
	case err != nil:
		return bad("Tenants", "%v", err)
	case !(c.FairPromptWeight >= 0 && c.FairPromptWeight <= 1000):
		return bad("FairPromptWeight", "must be between 0 and 1000")
	case !(c.FairOutputWeight >= 0 && c.FairOutputWeight <= 1000):
		return bad("FairOutputWeight", "must be between 0 and 1000")
	case c.MaxTenants < 0 || c.MaxTenants > 1<<20:
		return bad("MaxTenants", "must be between 1 and 1048576 (0: 4096)")
	case c.TenantMetrics < 0 || c.TenantMetrics > 1000:
		return bad("TenantMetrics", "must be between 0 and 1000")
	case c.RequestLogMaxBytes != 0 && (c.RequestLogMaxBytes < 64<<10 || c.RequestLogMaxBytes > 1<<40):
		return bad("RequestLogMaxBytes", "must be between 65536 and 1099511627776 bytes (0: 104857600)")
	case c.RequestLogFiles < 0 || c.RequestLogFiles > 1000:
		return bad("RequestLogFiles", "must be between 0 and 1000")
	case c.RequestLogBuffer < 0 || c.RequestLogBuffer > 1<<20:
		return bad("RequestLogBuffer", "must be between 1 and 1048576 (0: 4096)")
	}
	for _, t := range tenants {
		if t.Class != "" && !known(t.Class) {
			return bad("Tenants", "tenant %q: class %q is not in KNEECAP_CLASSES", t.Name, t.Class)
		}
	}
	return nil
}

// validHeaderName reports whether s is an HTTP header name (a token).
func validHeaderName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}

func validHeaderMode(s string) bool {
	_, err := slo.ParseHeaderMode(s)
	return err == nil || s == "" // unset in a Config built in code: any
}

func validPassthrough(paths []string) bool {
	for _, p := range paths {
		if !proxy.ValidPassthroughPath(p) {
			return false
		}
	}
	return true
}
