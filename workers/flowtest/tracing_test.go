package flowtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/tracing"
	"github.com/egressd/egressd/workers/leaser"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// sentinel is a secret put in a spec's auth and user-data: no span may carry it.
const sentinel = "SENTINEL-7f3a9c"

// newRecorder is a TracerProvider that keeps every span in memory, as one process's SDK.
func newRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// One trace runs through the roles of two processes' worth of TracerProviders, carried only
// by the NATS headers: the reconciler's decision, its op, the provisioner's handling and
// provider call, the result and the decision that folds it (provider 1); and a crawler's
// acquire (provider 3) through the leaser's candidate and slot write (provider 2).
func TestTraceCrossesRoles(t *testing.T) {
	h := newHarness(t)
	ops, opSpans := newRecorder(t)
	h.tracing = ops
	fake := providertest.NewFake("fake", fakeHost(4))
	h.provisioner("fake", fake, "w1")
	h.reconciler("r1")
	h.put("px", `{"provider":"fake","maxLeases":2,"auth":{"username":"crawler","password":"`+sentinel+`-pw"},"cloudInit":"#cloud-config\n# `+sentinel+`-ud"}`)
	st := h.waitPhase("px", events.PhaseRunning)

	var chain []tracetest.SpanStub
	h.waitFor("the create's spans to chain from decision to decision", 20*time.Second, func() (bool, string) {
		chain = opChain(opSpans.GetSpans(), "px")
		return len(chain) == 7, fmt.Sprintf("%d of 7 linked", len(chain))
	})
	for i, want := range []struct {
		name string
		kind trace.SpanKind
	}{
		{"decide", trace.SpanKindInternal},
		{"publish " + events.OpSubjectTemplate, trace.SpanKindProducer},
		{"process " + events.OpSubjectTemplate, trace.SpanKindConsumer},
		{"provider create", trace.SpanKindClient},
		{"publish " + events.OpResultSubjectTemplate, trace.SpanKindProducer},
		{"process " + events.OpResultSubjectTemplate, trace.SpanKindConsumer},
		{"decide", trace.SpanKindInternal},
	} {
		if s := chain[i]; s.Name != want.name || s.SpanKind != want.kind {
			t.Errorf("span %d: %s (%s), want %s (%s)", i, s.Name, s.SpanKind, want.name, want.kind)
		}
	}
	if got := attr(chain[1], "messaging.destination.name"); got != events.OpSubject("fake", "h1", "px") {
		t.Errorf("op publish destination %q", got)
	}
	if got := attr(chain[1], "messaging.system"); got != "nats" {
		t.Errorf("messaging.system %q", got)
	}

	// The leaser as another process, the crawler as a third.
	verdict(t, h, st)
	h.waitPhase("px", events.PhaseReady)
	leases, leaseSpans := newRecorder(t)
	startLeaser(t, h, leases)
	crawler, crawlerSpans := newRecorder(t)
	nc, _ := h.connectNC()
	c := client.New(nc, client.WithTracerProvider(crawler))
	ctx, root := crawler.Tracer("crawler").Start(h.ctx, "crawl")
	lease, err := c.Acquire(ctx, client.AcquireOptions{Holder: "crawler-1", Target: "example.com", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	root.End()

	send := only(t, crawlerSpans.GetSpans(), "send "+events.LeaseAcquireSubject)
	if send.Parent.SpanID() != root.SpanContext().SpanID() || send.SpanKind != trace.SpanKindClient {
		t.Errorf("client span %s is not the crawler's child", send.Name)
	}
	all := leaseSpans.GetSpans()
	serve := only(t, all, "process "+events.LeaseAcquireSubject)
	cand := only(t, all, "lease candidate")
	slot := only(t, all, "create "+events.BucketLeases)
	for _, link := range []struct{ child, parent tracetest.SpanStub }{{serve, send}, {cand, serve}, {slot, cand}} {
		if link.child.SpanContext.TraceID() != root.SpanContext().TraceID() || link.child.Parent.SpanID() != link.parent.SpanContext.SpanID() {
			t.Errorf("%s is not a child of %s in the crawler's trace", link.child.Name, link.parent.Name)
		}
	}
	if serve.SpanKind != trace.SpanKindServer || attr(cand, tracing.Proxy) != "px" ||
		attr(cand, tracing.LeaseOutcome) != "granted" || attr(slot, tracing.LeaseOutcome) != "created" {
		t.Errorf("lease spans: %s %s, candidate %v, slot %v", serve.Name, serve.SpanKind, cand.Attributes, slot.Attributes)
	}
	only(t, all, "process "+events.LeaseReleaseSubject)

	// Nothing secret anywhere: not the spec's auth or user-data (the password is also in the
	// lease's URL), not the lease's ID or token, not its holder or target.
	for _, s := range append(append(opSpans.GetSpans(), all...), crawlerSpans.GetSpans()...) {
		for _, secret := range []string{sentinel, lease.ID, lease.URL, "crawler-1", "example.com"} {
			if where := mentions(s, secret); where != "" {
				t.Errorf("span %s carries %q in %s", s.Name, secret, where)
			}
		}
	}
}

// opChain follows the spans of px's create from the decision that issued it to the one that
// folded its result, each the parent of the next but for the provider call and the result's
// publish, both children of the op's processing; it returns as much of it as is linked.
func opChain(spans []tracetest.SpanStub, proxy string) []tracetest.SpanStub {
	steps := []struct {
		name   string
		parent int // index in the chain
		ok     func(tracetest.SpanStub) bool
	}{
		{"publish " + events.OpSubjectTemplate, 0, func(s tracetest.SpanStub) bool { return attr(s, tracing.OpKind) == "create" }},
		{"process " + events.OpSubjectTemplate, 1, nil},
		{"provider create", 2, nil},
		{"publish " + events.OpResultSubjectTemplate, 2, nil},
		{"process " + events.OpResultSubjectTemplate, 4, nil},
		{"decide", 5, nil},
	}
	var best []tracetest.SpanStub
	for _, d := range spans {
		if d.Name != "decide" || attr(d, tracing.Proxy) != proxy || d.Parent.IsValid() {
			continue
		}
		chain := []tracetest.SpanStub{d}
	next:
		for _, st := range steps {
			for _, s := range spans {
				if s.Name == st.name && s.Parent.SpanID() == chain[st.parent].SpanContext.SpanID() &&
					s.SpanContext.TraceID() == d.SpanContext.TraceID() && (st.ok == nil || st.ok(s)) {
					chain = append(chain, s)
					continue next
				}
			}
			break
		}
		if len(chain) > len(best) {
			best = chain
		}
	}
	return best
}

func attr(s tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

func only(t *testing.T, spans []tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

// mentions says where in a span s appears: its name, an attribute, an event, a link, its
// status or its resource; "" when nowhere.
func mentions(s tracetest.SpanStub, secret string) string {
	has := func(kvs []attribute.KeyValue) bool {
		for _, kv := range kvs {
			if strings.Contains(string(kv.Key), secret) || strings.Contains(kv.Value.String(), secret) {
				return true
			}
		}
		return false
	}
	switch {
	case strings.Contains(s.Name, secret):
		return "its name"
	case has(s.Attributes):
		return "an attribute"
	case strings.Contains(s.Status.Description, secret):
		return "its status"
	case s.Resource != nil && has(s.Resource.Attributes()):
		return "its resource"
	}
	for _, e := range s.Events {
		if strings.Contains(e.Name, secret) || has(e.Attributes) {
			return "an event"
		}
	}
	for _, l := range s.Links {
		if has(l.Attributes) {
			return "a link"
		}
	}
	return ""
}

// verdict records a healthy probe of the proxy, as a prober would.
func verdict(t *testing.T, h *harness, st events.ProxyStatus) {
	rec := events.ProxyHealth{V: 1, Proxy: "px", Address: net.JoinHostPort(st.IP, strconv.Itoa(st.Port)), Healthy: true,
		SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: time.Now().UTC()}
	b, _ := json.Marshal(rec)
	if _, err := kvstore.PutTTL(h.ctx, h.store.JS, h.store.Health, "px", b, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// startLeaser starts a leaser replica on its own connection with its own TracerProvider.
func startLeaser(t *testing.T, h *harness, tp trace.TracerProvider) {
	nc, store := h.connectNC()
	l, err := leaser.New(leaser.Config{Store: store, NC: nc, Worker: "leaser-1", Log: h.log, Tracing: tp})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	h.wg.Go(func() { done <- l.Run(h.ctx) })
	select {
	case <-l.Ready():
	case err := <-done:
		t.Fatalf("leaser ended before serving: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("leaser not serving within 10s")
	}
}
