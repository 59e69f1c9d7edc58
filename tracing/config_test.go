package tracing

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFromEnv(t *testing.T) {
	on := func(kv ...string) map[string]string {
		m := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	t.Run("off", func(t *testing.T) {
		for _, env := range []map[string]string{
			{},
			{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"},
			on("OTEL_SDK_DISABLED", "true"),
			on("OTEL_TRACES_EXPORTER", "none"),
		} {
			c, err := FromEnv(env)
			if err != nil || c.Enabled() {
				t.Errorf("%v: enabled %v, %v", env, c.Enabled(), err)
			}
		}
	})
	t.Run("defaults", func(t *testing.T) {
		c, err := FromEnv(on())
		if err != nil {
			t.Fatal(err)
		}
		if c.Endpoint.String() != "http://collector:4318/v1/traces" || c.JSON || c.Gzip || c.Sampler != "" || c.SamplerArg != 1 || c.TLS != nil {
			t.Errorf("%+v", c)
		}
	})
	t.Run("every variable", func(t *testing.T) {
		c, err := FromEnv(on(
			"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/base/",
			"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", // the traces one wins
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json",
			"OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, x=y",
			"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip",
			"OTEL_EXPORTER_OTLP_TIMEOUT", "2500",
			"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25",
			"OTEL_SERVICE_NAME", "gw", "OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,k8s.pod.name=p%2C1",
			"OTEL_BSP_MAX_QUEUE_SIZE", "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10",
			"OTEL_BSP_SCHEDULE_DELAY", "50", "OTEL_BSP_EXPORT_TIMEOUT", "700",
		))
		if err != nil {
			t.Fatal(err)
		}
		if c.Endpoint.String() != "http://collector:4318/base/v1/traces" || !c.JSON || !c.Gzip || c.Timeout != 2500*time.Millisecond ||
			c.Headers["api-key"] != "a b" || c.Headers["x"] != "y" || c.Sampler != "parentbased_traceidratio" || c.SamplerArg != 0.25 ||
			c.ServiceName != "gw" || len(c.Resource) != 2 || c.MaxQueue != 100 || c.MaxBatch != 10 ||
			c.Delay != 50*time.Millisecond || c.ExportTimeout != 700*time.Millisecond {
			t.Errorf("%+v", c)
		}
		for _, kv := range c.Resource {
			if kv.Key == "k8s.pod.name" && kv.Value.AsString() != "p,1" {
				t.Errorf("resource %v", kv)
			}
		}
	})
	t.Run("traces endpoint as it is", func(t *testing.T) {
		c, err := FromEnv(on("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example:443/otlp"))
		if err != nil || c.Endpoint.String() != "https://traces.example:443/otlp" {
			t.Errorf("%v %v", c.Endpoint, err)
		}
	})
	for _, tc := range []struct {
		env  map[string]string
		bad  string
		says string
	}{
		{on("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc is not supported"},
		{on("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"},
		{on("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"), "OTEL_EXPORTER_OTLP_ENDPOINT", "http(s) URL"},
		{on("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://x"), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http(s) URL"},
		{on("OTEL_TRACES_SAMPLER", "always"), "OTEL_TRACES_SAMPLER", "traceidratio"},
		{on("OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "2"), "OTEL_TRACES_SAMPLER_ARG", "between 0 and 1"},
		{on("OTEL_RESOURCE_ATTRIBUTES", "a=b,nokey"), "OTEL_RESOURCE_ATTRIBUTES", "key=value"},
		{on("OTEL_EXPORTER_OTLP_HEADERS", "k=%zz"), "OTEL_EXPORTER_OTLP_HEADERS", "percent-encoded"},
		{on("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"), "OTEL_EXPORTER_OTLP_TIMEOUT", "milliseconds"},
		{on("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"), "OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"},
		{on("OTEL_BSP_MAX_QUEUE_SIZE", "0"), "OTEL_BSP_MAX_QUEUE_SIZE", "whole number"},
		{on("OTEL_BSP_MAX_QUEUE_SIZE", "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "20"), "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "at most"},
		{on("OTEL_BSP_SCHEDULE_DELAY", "-1"), "OTEL_BSP_SCHEDULE_DELAY", "milliseconds"},
		{on("OTEL_SDK_DISABLED", "maybe"), "OTEL_SDK_DISABLED", "true or false"},
		{on("OTEL_TRACES_EXPORTER", "zipkin"), "OTEL_TRACES_EXPORTER", "otlp or none"},
		{on("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"), "OTEL_EXPORTER_OTLP_CERTIFICATE", "no such file"},
		{on("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/x.pem"), "OTEL_EXPORTER_OTLP_CLIENT_KEY", "must be set with"},
	} {
		_, err := FromEnv(tc.env)
		var ve *VarError
		if !errors.As(err, &ve) || ve.Var != tc.bad || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line naming it that says %q", tc.bad, err, tc.says)
		}
	}
}
