package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The OTEL_* environment turns tracing on, leaves it off, or is refused with an error that
// names the variable at fault.
func TestTracingFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
		err  string // a part of the error; "" for none
	}{
		{name: "nothing set"},
		{name: "none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
		{name: "disabled", env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}},
		{name: "console", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, on: true},
		{name: "otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "otlp grpc", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{name: "an endpoint means otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "a list", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp, console"}, on: true},
		{name: "ratio sampler", env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, on: true},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "unknown protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, err: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{name: "bad endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, err: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "unknown sampler", env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "sometimes"}, err: "OTEL_TRACES_SAMPLER"},
		{name: "bad ratio", env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, err: "OTEL_TRACES_SAMPLER_ARG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTelEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			tp, err := newTracerProvider(context.Background(), &bytes.Buffer{})
			if tp != nil {
				defer func() { _ = tp.Shutdown(context.Background()) }()
			}
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err %v, want one naming %s", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case (tp != nil) != tc.on:
				t.Fatalf("tracing on = %v, want %v", tp != nil, tc.on)
			}
		})
	}
}

// The console exporter writes the spans, named for the service the environment names.
func TestTracingConsoleNamesTheService(t *testing.T) {
	for _, tc := range []struct{ env, want string }{{"", `"egressd"`}, {"edge-7", `"edge-7"`}} {
		clearOTelEnv(t)
		t.Setenv("OTEL_TRACES_EXPORTER", "console")
		if tc.env != "" {
			t.Setenv("OTEL_SERVICE_NAME", tc.env)
		}
		var out bytes.Buffer
		tp, err := newTracerProvider(context.Background(), &out)
		if err != nil {
			t.Fatal(err)
		}
		_, span := tp.Tracer("test").Start(context.Background(), "probe-span")
		span.End()
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := out.String(); !strings.Contains(s, "probe-span") || !strings.Contains(s, `"Value":`+tc.want) {
			t.Fatalf("OTEL_SERVICE_NAME=%q: console output lacks the span or service %s:\n%s", tc.env, tc.want, s)
		}
	}
}

// clearOTelEnv unsets, for the test, every OTEL_* variable the machine may have.
func clearOTelEnv(t *testing.T) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
}
