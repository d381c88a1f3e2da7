package provisioner_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/nats-io/nats.go/jetstream"
)

// busyCounter is a log handler that counts the deliveries that found the op lock busy.
type busyCounter struct{ n *atomic.Int64 }

func (h busyCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h busyCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "op lock busy" {
		h.n.Add(1)
	}
	return nil
}
func (h busyCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h busyCounter) WithGroup(string) slog.Handler      { return h }

// Two provisioners race for one op: the server redelivers it to the second while the first
// still runs it (its heartbeat is slower than the consumer's AckWait), and the second finds
// the op lock busy, many more times than OpsMaxAttempts. Those deliveries ran nothing, so they
// must not count: the op's transient failures are attempts 1 and 2, not final, and it
// succeeds at attempt 3. Counting deliveries, the second failure came at a delivery past
// OpsMaxAttempts and was terminated as final.
func TestLockBusyDeliveriesSpendNoAttempts(t *testing.T) {
	_, nc, js := kvstoretest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	results := collectResults(t, nc)

	fake := providertest.NewFake("fake", providers.Host{Name: "h1", MaxConcurrentOps: 2})
	fake.Fail("create", providers.ErrTransient, 2)
	var busy atomic.Int64
	// The first call holds the lock until the other deliveries have found it busy more often
	// than the attempt budget allows; the later calls run at once.
	var calls atomic.Int64
	fake.OnCall = func(op, _ string) {
		if op != "create" || calls.Add(1) != 1 {
			return
		}
		deadline := time.Now().Add(20 * time.Second)
		for busy.Load() <= kvstore.OpsMaxAttempts && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	log := slog.New(busyCounter{&busy})
	var provs []*provisioner.Provisioner
	for _, w := range []string{"w1", "w2"} {
		p, err := provisioner.New(provisioner.Config{Provider: "fake", Backend: fake, Catalog: fake.Catalog(),
			Installation: "inst", Worker: w, Buckets: provisioner.BucketsOf(store), Log: log,
			// A heartbeat slower than the AckWait below: the server redelivers the op while it runs.
			Timings: provisioner.Timings{LockTTL: 6 * time.Second, Heartbeat: 2 * time.Second, CreateBudget: 30 * time.Second,
				CallBudget: 5 * time.Second, LockBusyWait: 50 * time.Millisecond, FetchWait: 500 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		provs = append(provs, p)
	}
	if err := provs[0].Setup(ctx, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, events.OpsStream("fake"), jetstream.ConsumerConfig{
		Durable: events.HostConsumer("h1"), FilterSubject: events.HostFilter("fake", "h1"), AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 300 * time.Millisecond, MaxAckPending: 2, MaxDeliver: -1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, len(provs))
	for _, p := range provs {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := p.Run(ctx); err != nil {
				t.Errorf("provisioner: %v", err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		for range provs {
			<-done
		}
	})

	r := &rig{t: t, nc: nc, store: store, fake: fake, results: results}
	r.publish(createOp(r, "p1", `{"provider":"fake"}`))
	for i, want := range []struct {
		class events.ErrorClass
		final bool
	}{{events.ClassTransient, false}, {events.ClassTransient, false}, {events.ClassNone, true}} {
		res := r.result()
		if res.ErrorClass != want.class || res.Final != want.final || res.Attempt != i+1 {
			t.Fatalf("result %d: class %q, final %v, attempt %d; want class %q, final %v, attempt %d (lock-busy deliveries: %d)",
				i+1, res.ErrorClass, res.Final, res.Attempt, want.class, want.final, i+1, busy.Load())
		}
	}
	if n := busy.Load(); n <= kvstore.OpsMaxAttempts {
		t.Fatalf("only %d deliveries found the lock busy: the race this test is about did not happen", n)
	}
	if n := fake.Calls("create"); n != 3 {
		t.Fatalf("Create ran %d times, want 3", n)
	}
}
