package leaser_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// BenchmarkLeaseAtScaleR3 is BenchmarkLeaseAtScale on a three-node cluster with the buckets
// at three replicas (issue 31 item 4): 10,000 Ready proxies, 16 clients spread over the
// servers, against the R3 floor (the same create and delete of a slot, one KV call each,
// from one responder). The service is three leasers, one on each server, as a production
// layout runs them. Everything is in this process on this machine, so the servers, the
// leasers and the clients share its cores: the ratios say what the service adds to an R3
// round trip here, not what three machines would.
func BenchmarkLeaseAtScaleR3(b *testing.B) {
	cluster := kvstoretest.StartCluster(b, 3)
	srvs := cluster.Servers
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	_, js := kvstoretest.Connect(b, srvs[0])
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{Replicas: 3})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := kvstore.SpreadLeaseLeaders(ctx, js, store.Leases); err != nil {
		b.Fatal(err)
	}
	kvstoretest.SeedReadyFleet(b, js, scaleProxies)
	clients := make([]*nats.Conn, scaleClients)
	for i := range clients {
		clients[i], _ = kvstoretest.Connect(b, srvs[i%len(srvs)])
	}

	var floor kvstoretest.Latencies
	b.Run("floor", func(b *testing.B) {
		rnc, _ := kvstoretest.Connect(b, srvs[0])
		svc, err := kvstoretest.FloorService(rnc, kvstoretest.FloorSubjects, store.Leases.ForKey)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = svc.Stop() }()
		if err := rnc.Flush(); err != nil {
			b.Fatal(err)
		}
		kvstoretest.AwaitResponders(b, clients, "bench.floor.delete", "floor-probe.0")
		msgs := serverMsgs(srvs...)
		floor = kvstoretest.RunClients(b, clients, processCPU(b), kvstoretest.FloorOp(kvstoretest.FloorSubjects))
		floor.Report(b)
		msgs.report(b, srvs...)
	})
	b.Run("acquire-release", func(b *testing.B) {
		for i, srv := range srvs {
			defer startScaleLeaser(ctx, b, srv, i, "")()
		}
		kvstoretest.AwaitResponders(b, clients, events.LeaseReleaseSubject, `{"id":"px-00000.0.x"}`)
		msgs := serverMsgs(srvs...)
		got := kvstoretest.RunClients(b, clients, processCPU(b), acquireReleaseOp(false))
		got.Report(b)
		msgs.report(b, srvs...)
		got.ReportAgainst(b, floor)
	})
}

// startScaleLeaser runs a leaser connected to srv (raw mode mode; "" the default), waits
// until it serves, and returns what stops it.
func startScaleLeaser(ctx context.Context, b *testing.B, srv *server.Server, i int, mode events.RawLeaseEvents) (stop func()) {
	b.Helper()
	nc, js := kvstoretest.Connect(b, srv)
	store, err := kvstore.Bind(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	l, err := leaser.New(leaser.Config{Buckets: leaser.BucketsOf(store), NC: nc, Log: slog.New(slog.DiscardHandler),
		Worker: "bench-" + strconv.Itoa(i), RawEvents: mode})
	if err != nil {
		b.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = l.Run(lctx); close(done) }()
	stop = func() { cancel(); <-done }
	select {
	case <-l.Ready():
	case <-time.After(3 * time.Minute):
		stop()
		b.Fatal("a leaser did not load the fleet within 3 min")
	}
	return stop
}
