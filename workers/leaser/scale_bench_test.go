package leaser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

const (
	scaleProxies = 10_000
	scaleClients = 16
)

// BenchmarkLeaseAtScale is acquire+release by 16 concurrent clients against a fleet of 10,000
// Ready proxies, next to its floor on the same server in the same run: a micro responder
// doing one KV Create with a TTL on proxy_leases and one doing one KV Delete, so the floor
// has the service's shape (two request-replies, two KV writes) and nothing else. Keys of the
// floor are never reused, which makes each Create a single publish: the cheapest there is.
func BenchmarkLeaseAtScale(b *testing.B) {
	srv := kvstoretest.StartServer(b)
	_, js := kvstoretest.Connect(b, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	seedFleet(b, js, scaleProxies)
	clients := make([]*nats.Conn, scaleClients)
	for i := range clients {
		clients[i], _ = kvstoretest.Connect(b, srv)
	}

	var floor latencies
	b.Run("floor", func(b *testing.B) {
		rnc, _ := kvstoretest.Connect(b, srv)
		svc, err := floorService(rnc, store)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = svc.Stop() }()
		if err := rnc.Flush(); err != nil { // the subscriptions are at the server
			b.Fatal(err)
		}
		var seq atomic.Int64
		msgs := serverMsgs(srv)
		floor = runClients(b, clients, func(nc *nats.Conn) error {
			key := "floor-" + strconv.FormatInt(seq.Add(1), 10) + ".0"
			if err := request(nc, "bench.floor.create", []byte(key)); err != nil {
				return err
			}
			return request(nc, "bench.floor.delete", []byte(key))
		})
		floor.report(b)
		msgs.report(b, srv)
	})

	// The service in each raw mode of the lease events (events.RawLeaseEvents): ends, the
	// default (one event a cycle, its release); all (two: grant and release); reports (none:
	// the cycle is only counted in the statistics). Then ends with a request ID on every
	// acquire, as the Go client sends by default (decision 85: one read and one record write
	// more per acquire).
	for _, mode := range []events.RawLeaseEvents{events.RawEnds, events.RawAll, events.RawReports} {
		b.Run("acquire-release/raw="+string(mode), func(b *testing.B) {
			benchService(ctx, b, srv, clients, mode, false, floor)
		})
	}
	b.Run("acquire-release/requestId", func(b *testing.B) {
		benchService(ctx, b, srv, clients, events.RawEnds, true, floor)
	})
}

// benchService runs a leaser in raw mode mode and the clients' cycles against it, reporting
// the figures and their ratios to floor's.
func benchService(ctx context.Context, b *testing.B, srv *server.Server, clients []*nats.Conn,
	mode events.RawLeaseEvents, withID bool, floor latencies) {
	defer startScaleLeaser(ctx, b, srv, 0, mode)()
	msgs := serverMsgs(srv)
	got := runClients(b, clients, acquireReleaseOp(withID))
	got.report(b)
	msgs.report(b, srv)
	got.reportAgainst(b, floor)
}

// acquireReleaseOp is one client's cycle: an acquire (with a request ID of its own if
// withID) and the release of the lease it got.
func acquireReleaseOp(withID bool) func(*nats.Conn) error {
	var seq atomic.Int64
	return func(nc *nats.Conn) error {
		req := []byte(`{"ttlSeconds":60,"holder":"bench"}`)
		if withID {
			req = []byte(`{"ttlSeconds":60,"holder":"bench","requestId":"r-` + strconv.FormatInt(seq.Add(1), 10) + `"}`)
		}
		m, err := nc.Request(events.LeaseAcquireSubject, req, 10*time.Second)
		if err != nil {
			return err
		}
		var r events.LeaseReply
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Lease.ID == "" {
			return fmt.Errorf("acquire: %s", m.Data)
		}
		return request(nc, events.LeaseReleaseSubject, []byte(`{"id":"`+r.Lease.ID+`"}`))
	}
}

// reportAgainst gives l's figures as ratios to floor's.
func (l latencies) reportAgainst(b *testing.B, floor latencies) {
	if floor.n == 0 {
		return
	}
	b.ReportMetric(float64(l.p50)/float64(floor.p50), "p50/floor")
	b.ReportMetric(float64(l.p99)/float64(floor.p99), "p99/floor")
	b.ReportMetric(l.opsPerSec/floor.opsPerSec, "ops/floor")
	b.ReportMetric(float64(l.cpu)/float64(floor.cpu), "cpu/floor")
}

// seedFleet writes n managed proxies (spec and a Ready status) with async publishes, since
// one synchronous put at a time would take much of the benchmark's budget.
func seedFleet(b *testing.B, js jetstream.JetStream, n int) {
	b.Helper()
	kvstoretest.PutMany(b, js, func(yield func(kvstoretest.Record) bool) {
		for i := range n {
			name := fmt.Sprintf("px-%05d", i)
			spec := []byte(`{"provider":"local","maxLeases":3,"attributes":{"geo":"g` + strconv.Itoa(i%8) + `"}}`)
			st, err := json.Marshal(events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local",
				Host: "local", IP: fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250), Port: 3128})
			if err != nil {
				b.Fatal(err)
			}
			if !yield(kvstoretest.Record{Bucket: events.BucketProxies, Key: name, Value: spec}) ||
				!yield(kvstoretest.Record{Bucket: events.BucketStatus, Key: name, Value: st}) {
				return
			}
		}
	})
}

// msgCount is the server's message counters at the start of a run: the messages a cycle
// makes the server read and write (requests, replies, KV writes and their acks, watch and
// consumer deliveries, events) are most of what a cycle costs on one machine.
type msgCount struct{ in, out int64 }

func serverMsgs(srvs ...*server.Server) msgCount {
	var c msgCount
	for _, srv := range srvs {
		v, _ := srv.Varz(nil)
		c.in, c.out = c.in+v.InMsgs, c.out+v.OutMsgs
	}
	return c
}

// report gives the messages the servers read and wrote per operation since c (in a cluster,
// the routes' replication and their acks count too).
func (c msgCount) report(b *testing.B, srvs ...*server.Server) {
	now := serverMsgs(srvs...)
	b.ReportMetric(float64(now.in-c.in)/float64(b.N), "in-msgs/op")
	b.ReportMetric(float64(now.out-c.out)/float64(b.N), "out-msgs/op")
}

// latencies summarises one run of runClients.
type latencies struct {
	n         int
	p50, p99  time.Duration
	opsPerSec float64
	cpu       time.Duration // of the whole process (clients, service, server) per operation
}

func (l latencies) report(b *testing.B) {
	b.ReportMetric(float64(l.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(l.p99.Microseconds()), "p99-µs")
	b.ReportMetric(l.opsPerSec, "ops/s")
	b.ReportMetric(float64(l.cpu.Microseconds()), "cpu-µs/op")
}

// runClients runs b.N operations spread over the clients, each its own goroutine (one
// crawler each), and returns the latency percentiles and the throughput.
func runClients(b *testing.B, clients []*nats.Conn, op func(*nats.Conn) error) latencies {
	b.Helper()
	var next atomic.Int64
	per := make([][]time.Duration, len(clients))
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU(b)
	for i, nc := range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) && failed.Load() == nil {
				t0 := time.Now()
				if err := op(nc); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				per[i] = append(per[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU(b)-cpu0
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	all := slices.Concat(per...)
	slices.Sort(all)
	return latencies{n: len(all), p50: all[len(all)/2], p99: all[len(all)*99/100],
		opsPerSec: float64(len(all)) / elapsed.Seconds(), cpu: cpu / time.Duration(len(all))}
}

// processCPU is the CPU time the process has used, user and system: on a machine shared with
// other work it moves far less than the wall time, and what the service adds to its floor
// shows in it whatever the load.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// request is one request-reply that fails on a service error too.
func request(nc *nats.Conn, subject string, data []byte) error {
	m, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		return err
	}
	if e := m.Header.Get("Nats-Service-Error"); e != "" {
		return fmt.Errorf("%s: %s", subject, e)
	}
	return nil
}

// floorService answers create and delete of the key in the request body with one KV call each.
func floorService(nc *nats.Conn, store *kvstore.Store) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{Name: "benchfloor", Version: "1.0.0"})
	if err != nil {
		return nil, err
	}
	g := svc.AddGroup("bench.floor")
	handle := func(f func(ctx context.Context, key string) error) micro.Handler {
		return micro.HandlerFunc(func(req micro.Request) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := f(ctx, string(req.Data())); err != nil {
				_ = req.Error("500", err.Error(), nil)
				return
			}
			_ = req.Respond([]byte(`{}`))
		})
	}
	if err := g.AddEndpoint("create", handle(func(ctx context.Context, key string) error {
		_, err := kvstore.CreateTTL(ctx, store.Leases.ForKey(key), key, []byte(`{"v":1}`), time.Minute)
		return err
	})); err != nil {
		return nil, err
	}
	if err := g.AddEndpoint("delete", handle(func(ctx context.Context, key string) error {
		return store.Leases.ForKey(key).Delete(ctx, key)
	})); err != nil {
		return nil, err
	}
	return svc, nil
}
