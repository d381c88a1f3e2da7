package leaser_test

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/egressd/egressd/workers/leaser"
)

// A crawler's W3C traceparent reaches the HTTP face's span as it does over NATS: HTTP
// canonicalises the header's name ("Traceparent"), NATS keeps it as written.
func TestHTTPFaceJoinsTheCallersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	var addr string
	r := newRig(t, func(c *leaser.Config) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		c.HTTP = &leaser.HTTPConfig{Listener: ln, Crawlers: []leaser.Crawler{{Name: "crawler-a", TokenSHA256: leaser.TokenHash(httpToken)}}}
		c.Tracing = tp
	})
	r.seed(proxy{name: "px-a", maxLeases: 1})
	r.startLeasers(1)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+leaser.HTTPPathPrefix+"acquire", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+httpToken)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire: %d", resp.StatusCode)
	}
	// The span ends just after the reply is written.
	var span sdktrace.ReadOnlySpan
	eventually(t, 5*time.Second, "the request's span", func() bool {
		for _, s := range rec.Ended() {
			if strings.HasPrefix(s.Name(), "process ") {
				span = s
			}
		}
		return span != nil
	})
	if got := span.SpanContext().TraceID().String(); got != traceID {
		t.Fatalf("span %q is in trace %s, want the caller's %s", span.Name(), got, traceID)
	}
}
