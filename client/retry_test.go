package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// recorder keeps the spans of a client's requests and the provider they come from.
type recorder struct {
	*tracetest.SpanRecorder
	provider *sdktrace.TracerProvider
}

// tracedClient is a client of s on a connection of its own, and a traced caller's context:
// the client records a span per try (only for traced callers), kept by the recorder.
func tracedClient(t *testing.T, s *service, opts ...client.Option) (*client.Client, recorder, context.Context) {
	t.Helper()
	nc, err := nats.Connect(s.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rec := recorder{SpanRecorder: tracetest.NewSpanRecorder()}
	rec.provider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec.SpanRecorder))
	c := client.New(nc, append([]client.Option{client.WithTracerProvider(rec.provider)}, opts...)...)
	ctx, root := rec.provider.Tracer("crawler").Start(context.Background(), "crawl")
	t.Cleanup(func() { root.End() })
	return c, rec, ctx
}

// tries counts the client's finished requests to subject: one span per try.
func tries(rec recorder, subject string) int {
	n := 0
	for _, s := range rec.Ended() {
		if s.Name() == "send "+subject {
			n++
		}
	}
	return n
}

// A leaser restart costs the caller nothing: acquire, renew, release and report sent while
// no lease service runs are tried again until one is back, within the retry budget. The
// service comes back only once each call has failed at least twice.
func TestRequestsRideOutALeaserRestart(t *testing.T) {
	s, _ := startService(t)
	c, rec, ctx := tracedClient(t, s)
	g, err := c.AcquireOnce(ctx, client.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		subject string
		call    func() error
	}{
		{events.LeaseRenewSubject, func() error { _, err := c.Renew(ctx, g.ID, 0); return err }},
		{events.LeaseReportSubject, func() error { _, err := c.Report(ctx, g.ID, client.OK, ""); return err }},
		{events.LeaseReleaseSubject, func() error {
			if ok, err := c.Release(ctx, g.ID); err != nil || !ok {
				return errors.Join(err, errors.New("not released"))
			}
			return nil
		}},
		{events.LeaseAcquireSubject, func() error { _, err := c.AcquireOnce(ctx, client.AcquireOptions{TTL: time.Minute}); return err }},
	} {
		s.stop()
		before := tries(rec, step.subject)
		done := make(chan error, 1)
		go func() { done <- step.call() }()
		deadline := time.Now().Add(5 * time.Second)
		for tries(rec, step.subject) < before+2 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: fewer than two tries within 5s while no service ran", step.subject)
			}
			time.Sleep(10 * time.Millisecond)
		}
		s.start(t)
		if err := <-done; err != nil {
			t.Fatalf("%s across a restart: %v", step.subject, err)
		}
	}
}

// What another try cannot mend is returned at once: a refusal is tried once, and with no
// retry budget nothing is tried again.
func TestRefusalsAreNotTriedAgain(t *testing.T) {
	s, _ := startService(t)
	c, rec, ctx := tracedClient(t, s)
	if _, err := c.Renew(ctx, "px-1.0.0123456789abcdef", 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("renew of an unknown lease: %v", err)
	}
	if _, err := c.AcquireOnce(ctx, client.AcquireOptions{TTL: 2 * time.Hour}); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("acquire with a TTL too long: %v", err)
	}
	if n, m := tries(rec, events.LeaseRenewSubject), tries(rec, events.LeaseAcquireSubject); n != 1 || m != 1 {
		t.Errorf("%d renew and %d acquire tries, want 1 each", n, m)
	}
	s.stop()
	once, _, _ := tracedClient(t, s, client.WithRetryBudget(0), client.WithTracerProvider(rec.provider))
	if _, err := once.AcquireOnce(ctx, client.AcquireOptions{}); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no service, no retry budget: %v", err)
	}
	if n := tries(rec, events.LeaseAcquireSubject); n != 2 {
		t.Errorf("%d acquire tries in all, want 2", n)
	}
}
