package leaser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkAcquireRelease is one lease acquired and released through the service (two
// request-replies, a slot Create with a TTL and a Delete). Compare it with the baselines from
// the same run: a bare request-reply, and a bare KV Create+Delete.
func BenchmarkAcquireRelease(b *testing.B) {
	acquireRelease(b, startBenchLeaser(b, nil, nil))
}

// BenchmarkAcquireReleaseEvents is BenchmarkAcquireRelease in each raw mode of the lease
// events: all (a grant and a release event stored per cycle, as before the statistics), ends
// (the default: the release only) and reports (none: the cycle is only counted in the
// statistics). The difference to reports is what the raw history of a cycle costs.
func BenchmarkAcquireReleaseEvents(b *testing.B) {
	for _, mode := range []events.RawLeaseEvents{events.RawAll, events.RawEnds, events.RawReports} {
		b.Run("raw="+string(mode), func(b *testing.B) {
			acquireRelease(b, startBenchLeaser(b, nil, func(c *leaser.Config) { c.RawEvents = mode }))
		})
	}
}

// BenchmarkAcquireReleaseWaitServedAtOnce is BenchmarkAcquireRelease with waitSeconds on
// every acquire, a slot always free: what asking to wait costs when nothing has to (issue 23:
// at most 1.1× the plain cycle of the same run).
func BenchmarkAcquireReleaseWaitServedAtOnce(b *testing.B) {
	acquireReleaseWith(b, startBenchLeaser(b, nil, nil), `{"ttlSeconds":60,"waitSeconds":30}`)
}

// startBenchLeaser starts a leaser with tp (nil: the global provider) and cfg's changes over
// 10 Ready proxies and returns a client connection to it.
func startBenchLeaser(b *testing.B, tp trace.TracerProvider, cfg func(*leaser.Config)) *nats.Conn {
	srv := kvstoretest.StartServer(b)
	nc, js := kvstoretest.Connect(b, srv)
	ctx, cancel := context.WithCancel(context.Background())
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10 {
		name := fmt.Sprintf("p%d", i)
		if _, err := store.Proxies.Put(ctx, name, []byte(`{"provider":"local","maxLeases":3}`)); err != nil {
			b.Fatal(err)
		}
		st := events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local", Host: "local", IP: fmt.Sprintf("127.0.0.%d", i+2), Port: 3128}
		if _, err := kvstore.PutJSON(ctx, store.Status, name, st); err != nil {
			b.Fatal(err)
		}
	}
	lnc, _ := kvstoretest.Connect(b, srv)
	c := leaser.Config{Buckets: leaser.BucketsOf(store), NC: lnc, Log: slog.New(slog.DiscardHandler), Tracing: tp}
	if cfg != nil {
		cfg(&c)
	}
	l, err := leaser.New(c)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	<-l.Ready()
	return nc
}

// acquireRelease times one acquire and one release per iteration, and reports the CPU time
// the process (client, leaser and server) spent per iteration: on a shared machine it varies
// far less than the wall time.
func acquireRelease(b *testing.B, nc *nats.Conn) { acquireReleaseWith(b, nc, `{"ttlSeconds":60}`) }

// acquireReleaseWith is acquireRelease with req as the acquire request.
func acquireReleaseWith(b *testing.B, nc *nats.Conn, req string) {
	acquireReleaseEach(b, nc, func(int) []byte { return []byte(req) })
}

// BenchmarkAcquireReleaseRequestID is BenchmarkAcquireRelease with a new requestId on every
// acquire, as the clients send: what idempotence costs (a read of the request record before
// the grant and its Create after). Issue 31: the ratio to BenchmarkAcquireRelease of the same
// run is in docs/performance.md.
func BenchmarkAcquireReleaseRequestID(b *testing.B) {
	acquireReleaseEach(b, startBenchLeaser(b, nil, nil), func(i int) []byte {
		return fmt.Appendf(nil, `{"ttlSeconds":60,"requestId":"bench-%d"}`, i)
	})
}

// acquireReleaseEach is acquireRelease with req(i) as the i-th acquire request.
func acquireReleaseEach(b *testing.B, nc *nats.Conn, req func(i int) []byte) {
	cpu0 := cpuTime()
	defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") }()
	b.ResetTimer()
	for i := range b.N {
		m, err := nc.Request(events.LeaseAcquireSubject, req(i), 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		var r events.LeaseReply
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Lease.ID == "" {
			b.Fatalf("acquire: %s", m.Data)
		}
		if _, err := nc.Request(events.LeaseReleaseSubject, []byte(`{"id":"`+r.Lease.ID+`"}`), 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenew is a renewal of a held lease (a read of the slot and its rewrite with a TTL),
// and of a lease released before (the slot found empty: a 404, after a read of the marker
// that removed it, which tells a lease another leaser ended with its proxy from one that just
// ended). The second is what a crawler that lost its lease pays once.
func BenchmarkRenew(b *testing.B) {
	for _, held := range []bool{true, false} {
		name := map[bool]string{true: "held", false: "released"}[held]
		b.Run(name, func(b *testing.B) {
			nc := startBenchLeaser(b, nil, nil)
			m, err := nc.Request(events.LeaseAcquireSubject, []byte(`{"ttlSeconds":600}`), 5*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			var r events.LeaseReply
			if err := json.Unmarshal(m.Data, &r); err != nil || r.Lease.ID == "" {
				b.Fatalf("acquire: %s", m.Data)
			}
			renew := []byte(`{"id":"` + r.Lease.ID + `"}`)
			want := ""
			if !held {
				if _, err := nc.Request(events.LeaseReleaseSubject, renew, 5*time.Second); err != nil {
					b.Fatal(err)
				}
				want = "404"
			}
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				m, err := nc.Request(events.LeaseRenewSubject, renew, 5*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if got := m.Header.Get("Nats-Service-Error-Code"); got != want {
					b.Fatalf("renew: code %q, want %q: %s", got, want, m.Data)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkBaselineRequestReply is a bare NATS request-reply on the same kind of server.
func BenchmarkBaselineRequestReply(b *testing.B) {
	srv := kvstoretest.StartServer(b)
	nc, _ := kvstoretest.Connect(b, srv)
	rnc, _ := kvstoretest.Connect(b, srv)
	sub, err := rnc.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = rnc.Flush()
	b.ResetTimer()
	for range b.N {
		if _, err := nc.Request("bench.echo", []byte(`{"ttlSeconds":60}`), 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineKVCreateDelete is a bare slot Create with a TTL and its Delete.
func BenchmarkBaselineKVCreateDelete(b *testing.B) {
	srv := kvstoretest.StartServer(b)
	_, js := kvstoretest.Connect(b, srv)
	ctx := context.Background()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		key := fmt.Sprintf("p%d.0", i%10)
		if _, err := kvstore.CreateTTL(ctx, store.Leases.ForKey(key), key, []byte(`{}`), time.Minute); err != nil {
			b.Fatal(err)
		}
		if err := store.Leases.ForKey(key).Delete(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the user and system time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
