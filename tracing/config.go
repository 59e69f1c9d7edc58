package tracing

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// Config is the tracing configuration, read from the standard OTEL_*
// variables by FromEnv. The zero value is off.
type Config struct {
	// Endpoint is where spans are sent over OTLP/HTTP, the whole URL (path
	// included); nil means tracing is off.
	Endpoint *url.URL
	// JSON sends OTLP/HTTP in JSON (http/json) instead of protobuf.
	JSON bool
	// Headers are sent with every export (an API key for a hosted
	// collector, say).
	Headers map[string]string
	// Gzip compresses every export.
	Gzip bool
	// Timeout bounds one HTTP attempt of an export; ExportTimeout bounds an
	// export with its retries. Zero means 10 s and 30 s.
	Timeout, ExportTimeout time.Duration
	// TLS is the client's TLS configuration for an https endpoint; nil
	// means the system's roots.
	TLS *tls.Config
	// Sampler names the sampler (OTEL_TRACES_SAMPLER's values; empty means
	// parentbased_always_on) and SamplerArg is the ratio of the ratio
	// samplers (1 unless set).
	Sampler    string
	SamplerArg float64
	// ServiceName is service.name (empty: "kneecap"); Resource are the
	// other resource attributes.
	ServiceName string
	Resource    []attribute.KeyValue
	// MaxQueue bounds the spans that wait for export (beyond it a span is
	// dropped and counted), MaxBatch the spans of one export, and Delay is
	// the longest a span waits for its batch to fill. Zero means 2048, 512
	// and 5 s.
	MaxQueue, MaxBatch int
	Delay              time.Duration
}

// Enabled reports whether c turns tracing on.
func (c Config) Enabled() bool { return c.Endpoint != nil }

// Defaults of the OpenTelemetry specification for what Config leaves zero.
const (
	DefaultTimeout       = 10 * time.Second
	DefaultExportTimeout = 30 * time.Second
	DefaultMaxQueue      = 2048
	DefaultMaxBatch      = 512
	DefaultDelay         = 5 * time.Second
	DefaultServiceName   = "kneecap"
)

// VarError is a bad value of an OTEL_* variable; its message is one line
// that names the variable.
type VarError struct {
	Var string
	Err error
}

func (e *VarError) Error() string { return e.Var + ": " + e.Err.Error() }
func (e *VarError) Unwrap() error { return e.Err }

// Samplers are the values of OTEL_TRACES_SAMPLER that FromEnv takes.
var Samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

// FromEnv reads the configuration from the OTEL_* variables in env (the
// names the OpenTelemetry specification gives, as every SDK reads them):
//
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as it is) or
//     OTEL_EXPORTER_OTLP_ENDPOINT (with /v1/traces added): tracing is off
//     unless one is set, or when OTEL_SDK_DISABLED is true or
//     OTEL_TRACES_EXPORTER is none;
//   - OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL: http/protobuf (the default) or
//     http/json; grpc is refused at startup (only the OTLP/HTTP exporter is built in);
//   - OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, _COMPRESSION, _TIMEOUT,
//     _CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY;
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG;
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES;
//   - OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
//     OTEL_BSP_SCHEDULE_DELAY and OTEL_BSP_EXPORT_TIMEOUT.
//
// A malformed value is a *VarError naming the variable, so that a typo
// stops startup instead of silently falling back to a default, as the
// SDK's own reading of the process's environment would. Certificate files
// are read here, once.
func FromEnv(env map[string]string) (Config, error) {
	var c Config
	get := func(name string) (string, string) { // TRACES_ first
		if v := strings.TrimSpace(env["OTEL_EXPORTER_OTLP_TRACES_"+name]); v != "" {
			return "OTEL_EXPORTER_OTLP_TRACES_" + name, v
		}
		return "OTEL_EXPORTER_OTLP_" + name, strings.TrimSpace(env["OTEL_EXPORTER_OTLP_"+name])
	}
	bad := func(name, format string, args ...any) (Config, error) {
		return Config{}, &VarError{Var: name, Err: fmt.Errorf(format, args...)}
	}
	if v := strings.TrimSpace(env["OTEL_SDK_DISABLED"]); v != "" {
		off, err := strconv.ParseBool(v)
		if err != nil {
			return bad("OTEL_SDK_DISABLED", "must be true or false")
		}
		if off {
			return c, nil
		}
	}
	switch v := strings.TrimSpace(env["OTEL_TRACES_EXPORTER"]); v {
	case "", "otlp":
	case "none":
		return c, nil
	default:
		return bad("OTEL_TRACES_EXPORTER", "must be otlp or none")
	}
	name, endpoint := get("ENDPOINT")
	if endpoint == "" {
		return c, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad(name, "must be an http(s) URL such as http://otel-collector:4318")
	}
	if name == "OTEL_EXPORTER_OTLP_ENDPOINT" {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		u.RawPath = ""
	} else if u.Path == "" {
		u.Path = "/"
	}
	c.Endpoint = u

	switch name, v := get("PROTOCOL"); v {
	case "", "http/protobuf":
	case "http/json":
		c.JSON = true
	case "grpc":
		return bad(name, "grpc is not supported: use http/protobuf (OTLP/HTTP, the collector's port 4318)")
	default:
		return bad(name, "must be http/protobuf or http/json")
	}
	if name, v := get("HEADERS"); v != "" {
		if c.Headers, err = pairs(v); err != nil {
			return bad(name, "%v", err)
		}
		for k := range c.Headers {
			c.Headers[k] = strings.TrimSpace(c.Headers[k])
		}
	}
	switch name, v := get("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		c.Gzip = true
	default:
		return bad(name, "must be gzip or none")
	}
	if name, v := get("TIMEOUT"); v != "" {
		if c.Timeout, err = millis(v); err != nil {
			return bad(name, "%v", err)
		}
	}
	if c.TLS, err = tlsFrom(get); err != nil {
		return Config{}, err
	}

	c.Sampler = strings.TrimSpace(env["OTEL_TRACES_SAMPLER"])
	c.SamplerArg = 1
	switch c.Sampler {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if v := strings.TrimSpace(env["OTEL_TRACES_SAMPLER_ARG"]); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return bad("OTEL_TRACES_SAMPLER_ARG", "must be a ratio between 0 and 1, e.g. 0.1")
			}
			c.SamplerArg = f
		}
	default:
		return bad("OTEL_TRACES_SAMPLER", "must be one of %s", strings.Join(Samplers, ", "))
	}

	c.ServiceName = strings.TrimSpace(env["OTEL_SERVICE_NAME"])
	if v := strings.TrimSpace(env["OTEL_RESOURCE_ATTRIBUTES"]); v != "" {
		kv, err := pairs(v)
		if err != nil {
			return bad("OTEL_RESOURCE_ATTRIBUTES", "%v", err)
		}
		for k, v := range kv {
			c.Resource = append(c.Resource, attribute.String(k, v))
		}
	}

	for _, n := range []struct {
		name string
		to   *int
	}{{"OTEL_BSP_MAX_QUEUE_SIZE", &c.MaxQueue}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &c.MaxBatch}} {
		if v := strings.TrimSpace(env[n.name]); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil || i < 1 || i > 1<<20 {
				return bad(n.name, "must be a whole number between 1 and 1048576")
			}
			*n.to = i
		}
	}
	if c.MaxQueue > 0 && c.MaxBatch > c.MaxQueue {
		return bad("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "must be at most OTEL_BSP_MAX_QUEUE_SIZE (%d)", c.MaxQueue)
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"OTEL_BSP_SCHEDULE_DELAY", &c.Delay}, {"OTEL_BSP_EXPORT_TIMEOUT", &c.ExportTimeout}} {
		if v := strings.TrimSpace(env[d.name]); v != "" {
			if *d.to, err = millis(v); err != nil {
				return bad(d.name, "%v", err)
			}
		}
	}
	return c, nil
}

// millis parses the specification's durations: whole milliseconds, at
// least 1 and at most a day.
func millis(v string) (time.Duration, error) {
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 1 || ms > 24*3600*1000 {
		return 0, errors.New("must be whole milliseconds between 1 and 86400000, e.g. 10000")
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// pairs parses a list of key=value pairs separated by commas, keys and
// values percent-encoded (the W3C Baggage format the specification uses
// for OTEL_RESOURCE_ATTRIBUTES and the OTLP headers).
func pairs(s string) (map[string]string, error) {
	m := map[string]string{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value (a list of key=value separated by commas)", item)
		}
		key, err1 := url.PathUnescape(strings.TrimSpace(k))
		val, err2 := url.PathUnescape(strings.TrimSpace(v))
		if err1 != nil || err2 != nil || key == "" {
			return nil, fmt.Errorf("%q is not key=value with percent-encoded key and value", item)
		}
		m[key] = val
	}
	return m, nil
}

// tlsFrom reads the certificate files the OTLP variables name: a CA to
// trust, and a client certificate with its key (both or neither). nil
// means none is set.
func tlsFrom(get func(string) (string, string)) (*tls.Config, error) {
	caVar, ca := get("CERTIFICATE")
	certVar, cert := get("CLIENT_CERTIFICATE")
	keyVar, key := get("CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, &VarError{Var: caVar, Err: err}
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, &VarError{Var: caVar, Err: errors.New("no PEM certificate in " + ca)}
		}
	}
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, &VarError{Var: certVar, Err: err}
		}
		cfg.Certificates = []tls.Certificate{pair}
	case cert != "":
		return nil, &VarError{Var: keyVar, Err: errors.New("must be set with " + certVar)}
	case key != "":
		return nil, &VarError{Var: certVar, Err: errors.New("must be set with " + keyVar)}
	}
	return cfg, nil
}
