package client_test

import (
	"context"
	"testing"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// The client passes on the caller's trace context, and only that: with no SDK installed
// (the API's no-op) a traced caller's request still carries its traceparent, and an
// untraced caller's carries no header.
func TestRequestsCarryTheCallersTraceContext(t *testing.T) {
	srv := kvstoretest.StartServer(t)
	nc, _ := kvstoretest.Connect(t, srv)
	seen := make(chan nats.Header, 1)
	sub, err := nc.Subscribe(events.LeaseReleaseSubject, func(m *nats.Msg) {
		seen <- m.Header
		_ = m.Respond([]byte(`{"released":true}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab, 1}, SpanID: trace.SpanID{0xcd, 2}, TraceFlags: trace.FlagsSampled})
	c := client.New(nc)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"traced", trace.ContextWithSpanContext(context.Background(), sc), "00-ab010000000000000000000000000000-cd02000000000000-01"},
		{"untraced", context.Background(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.Release(tc.ctx, "some-lease"); err != nil {
				t.Fatal(err)
			}
			h := <-seen
			if got := h.Get("traceparent"); got != tc.want {
				t.Fatalf("traceparent %q, want %q", got, tc.want)
			}
			if tc.want == "" && len(h) != 0 {
				t.Fatalf("an untraced request carries headers %v", h)
			}
		})
	}
}
