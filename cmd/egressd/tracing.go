package main

import (
	"context"

	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingShutdownBudget bounds the flush of the spans still queued when egressd stops, so
// a collector that is down cannot hold a shutdown.
const tracingShutdownBudget = 2 * time.Second

// setupTracing installs, as the global TracerProvider every role and the client use, the
// SDK with the exporters the standard OTEL_* environment names (docs/tracing.md). With none
// named it installs nothing: the API's no-op stays, and a span costs next to nothing. The
// returned stop flushes and shuts the SDK down within tracingShutdownBudget.
func setupTracing(ctx context.Context, stdout io.Writer, log *slog.Logger) (stop func(), err error) {
	tlog := log.With("component", "tracing")
	// Set first: the SDK reports what it cannot use while it is being built.
	otel.SetErrorHandler(&warnOnce{log: tlog})
	otel.SetLogger(logr.FromSlogHandler(tlog.Handler()))
	tp, err := newTracerProvider(ctx, stdout)
	if err != nil || tp == nil {
		return func() {}, err
	}
	otel.SetTracerProvider(tp)
	tlog.Info("tracing on", "exporters", os.Getenv("OTEL_TRACES_EXPORTER"))
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownBudget)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			tlog.Debug("tracing shutdown", "err", err)
		}
	}, nil
}

// newTracerProvider is the SDK as the environment configures it, or nil when it names no
// exporter.
func newTracerProvider(ctx context.Context, stdout io.Writer) (*sdktrace.TracerProvider, error) {
	exporters, err := tracingExporters(ctx, stdout)
	if err != nil || len(exporters) == 0 {
		return nil, err
	}
	sampler, err := samplerFromEnv()
	if err != nil {
		return nil, err
	}
	// The environment's OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the defaults.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "egressd"),
		attribute.String("service.instance.id", identity())), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler)}
	for _, e := range exporters {
		opts = append(opts, sdktrace.WithBatcher(e))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

// tracingExporters builds the exporters OTEL_TRACES_EXPORTER names (a comma list of otlp,
// console and none). Unset, it means otlp if an OTLP endpoint is set and none otherwise:
// unlike the specification's default (otlp), egressd exports nothing nobody asked for.
func tracingExporters(ctx context.Context, stdout io.Writer) ([]sdktrace.SpanExporter, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	names := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if names == "" && (os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		names = "otlp"
	}
	var out []sdktrace.SpanExporter
	for n := range strings.SplitSeq(names, ",") {
		var e sdktrace.SpanExporter
		var err error
		switch n = strings.ToLower(strings.TrimSpace(n)); n {
		case "", "none":
			continue
		case "otlp":
			e, err = otlpExporter(ctx)
		case "console":
			e, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
		default:
			err = fmt.Errorf("OTEL_TRACES_EXPORTER: unknown exporter %q (otlp, console or none)", n)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// otlpExporter is the OTLP exporter of the configured protocol; the exporter reads the rest
// of OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout, TLS) itself, and connects lazily.
func otlpExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if s := os.Getenv(v); s != "" {
			if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("%s %q: want an http:// or https:// URL", v, s)
			}
		}
	}
	key, proto := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		key, proto = "OTEL_EXPORTER_OTLP_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, fmt.Errorf("%s %q: want http/protobuf or grpc", key, proto)
}

// samplerFromEnv reads OTEL_TRACES_SAMPLER and its argument as the specification defines
// them, refusing what it does not know instead of falling back silently.
func samplerFromEnv() (sdktrace.Sampler, error) {
	arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
		}
		return sdktrace.TraceIDRatioBased(r), nil
	}
	switch name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER"))); name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		return ratio()
	case "parentbased_traceidratio":
		s, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(s), nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER %q: unknown sampler (always_on, always_off, traceidratio, "+
			"parentbased_always_on, parentbased_always_off, parentbased_traceidratio)", name)
	}
}

// warnOnce is the SDK's error handler: an exporter that cannot reach its collector fails on
// every batch, so the first failure is a warning and the rest are debug lines.
type warnOnce struct {
	log    *slog.Logger
	warned atomic.Bool
}

func (w *warnOnce) Handle(err error) {
	if err == nil {
		return
	}
	if !w.warned.Swap(true) {
		w.log.Warn("tracing: spans could not be exported; further failures are logged at debug level", "err", err)
		return
	}
	w.log.Debug("tracing: spans could not be exported", "err", err)
}
