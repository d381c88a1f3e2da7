package leaser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
	kvstoretest.SeedReadyFleet(b, js, scaleProxies)
	clients := make([]*nats.Conn, scaleClients)
	for i := range clients {
		clients[i], _ = kvstoretest.Connect(b, srv)
	}

	var floor kvstoretest.Latencies
	b.Run("floor", func(b *testing.B) {
		rnc, _ := kvstoretest.Connect(b, srv)
		svc, err := kvstoretest.FloorService(rnc, kvstoretest.FloorSubjects, store.Leases.ForKey)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = svc.Stop() }()
		if err := rnc.Flush(); err != nil { // the subscriptions are at the server
			b.Fatal(err)
		}
		msgs := serverMsgs(srv)
		floor = kvstoretest.RunClients(b, clients, processCPU(b), kvstoretest.FloorOp(kvstoretest.FloorSubjects))
		floor.Report(b)
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
	mode events.RawLeaseEvents, withID bool, floor kvstoretest.Latencies) {
	defer startScaleLeaser(ctx, b, srv, 0, mode)()
	msgs := serverMsgs(srv)
	got := kvstoretest.RunClients(b, clients, processCPU(b), acquireReleaseOp(withID))
	got.Report(b)
	msgs.report(b, srv)
	got.ReportAgainst(b, floor)
}

// acquireReleaseOp is one client's cycle: an acquire (with a request ID of its own if
// withID) and the release of the lease it got.
// opRounds numbers the calls of acquireReleaseOp in this process.
var opRounds atomic.Int64

func acquireReleaseOp(withID bool) func(*nats.Conn) error {
	var seq atomic.Int64
	// Each request ID is new, as the Go client's are: the benchmark calls this once per round
	// on the same buckets, and an ID of an earlier round would find its record (a retry whose
	// lease ended, which takes the record over) instead of a first try's path.
	prefix := `{"ttlSeconds":60,"holder":"bench","requestId":"r` + strconv.FormatInt(opRounds.Add(1), 10) + `-`
	return func(nc *nats.Conn) error {
		req := []byte(`{"ttlSeconds":60,"holder":"bench"}`)
		if withID {
			req = []byte(prefix + strconv.FormatInt(seq.Add(1), 10) + `"}`)
		}
		m, err := nc.Request(events.LeaseAcquireSubject, req, 10*time.Second)
		if err != nil {
			return err
		}
		var r events.LeaseReply
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Lease.ID == "" {
			return fmt.Errorf("acquire: %s", m.Data)
		}
		return kvstoretest.Request(nc, events.LeaseReleaseSubject, []byte(`{"id":"`+r.Lease.ID+`"}`))
	}
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

// processCPU counts the CPU time the process has used, user and system: on a machine shared with
// other work it moves far less than the wall time, and what the service adds to its floor
// shows in it whatever the load.
func processCPU(b *testing.B) func() time.Duration {
	return func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
}
