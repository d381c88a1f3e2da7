package leaser_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// On a three-node cluster with R3 buckets and three lease shards whose leaders setup spread
// over the nodes, cutting off the node that leads one shard (as its crash would) leaves that
// shard without a leader until an election; acquires meanwhile are granted on proxies of the other shards, no
// proxy ever holds more than maxLeases slots, and a lease held in the stalled shard is still
// renewable once it has a leader again.
func TestAcquiresGoOnWhileOneShardHasNoLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node cluster and a Raft election")
	}
	cluster := kvstoretest.StartCluster(t, 3)
	servers := cluster.Servers
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	admin := connectTo(t, servers[0])
	adminJS, _ := jetstream.New(admin)
	store, err := kvstore.Ensure(ctx, adminJS, kvstore.Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if store.Leases.Len() != 3 {
		t.Fatalf("%d lease shards with --replicas 3, want 3", store.Leases.Len())
	}
	leaders, _, err := kvstore.SpreadLeaseLeaders(ctx, adminJS, store.Leases)
	if err != nil {
		t.Fatal(err)
	}
	if leaders[0] == leaders[1] || leaders[1] == leaders[2] || leaders[0] == leaders[2] {
		t.Fatalf("shard leaders not spread over the nodes: %v", leaders)
	}
	const stalled = 1 // the shard whose leader goes down
	victim := -1
	var alive []*server.Server
	for i, s := range servers {
		if s.Name() == leaders[stalled] {
			victim = i
		} else {
			alive = append(alive, s)
		}
	}

	// Proxies in every shard, seeded through a node that stays.
	const maxLeases = 2
	seedNC := connectTo(t, alive[0])
	seedJS, _ := jetstream.New(seedNC)
	seedStore, err := kvstore.Bind(ctx, seedJS)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 24 {
		name := fmt.Sprintf("px-%02d", i)
		names = append(names, name)
		if _, err := kvstore.PutJSON(ctx, seedStore.Proxies, name, map[string]any{"provider": "local", "maxLeases": maxLeases}); err != nil {
			t.Fatal(err)
		}
		if _, err := kvstore.PutJSON(ctx, seedStore.Status, name, events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed",
			Provider: "local", Host: "local", IP: fmt.Sprintf("127.0.1.%d", i+1), Port: 3128}); err != nil {
			t.Fatal(err)
		}
	}

	// One leaser and the crawler on the nodes that stay.
	lnc := connectTo(t, alive[0])
	ljs, _ := jetstream.New(lnc)
	lstore, err := kvstore.Bind(ctx, ljs)
	if err != nil {
		t.Fatal(err)
	}
	l, err := leaser.New(leaser.Config{Buckets: leaser.BucketsOf(lstore), NC: lnc, MinTTL: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(lctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("leaser: %v", err)
		}
	}()
	select {
	case <-l.Ready():
	case err := <-done:
		t.Fatalf("leaser: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("leaser not serving within 30s")
	}
	crawler := connectTo(t, alive[1])
	// TTLs far longer than any election on a loaded machine: the lease kept across the
	// failover must not simply run out.
	acquire := func() (events.LeaseGrant, reply) {
		m, err := crawler.Request(events.LeaseAcquireSubject, []byte(`{"ttlSeconds":900}`), 10*time.Second)
		// The crawler is on another server than the leaser: the service's subscription
		// reaches it over the cluster route a moment after the leaser is serving.
		for deadline := time.Now().Add(10 * time.Second); errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			m, err = crawler.Request(events.LeaseAcquireSubject, []byte(`{"ttlSeconds":900}`), 10*time.Second)
		}
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		rep := decodeReply(t, m)
		var lr events.LeaseReply
		if rep.code == 0 {
			_ = json.Unmarshal(rep.body, &lr)
		}
		return lr.Lease, rep
	}
	release := func(id string) {
		if _, err := crawler.Request(events.LeaseReleaseSubject, []byte(`{"id":"`+id+`"}`), 10*time.Second); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	// A lease in the shard that will stall, kept across the failover.
	var kept events.LeaseGrant
	for kept.ID == "" {
		g, rep := acquire()
		if rep.code != 0 {
			t.Fatalf("acquire before the failover: %d %s", rep.code, rep.err.Message)
		}
		if lstore.Leases.Index(g.Proxy) == stalled {
			kept = g
		} else {
			release(g.ID)
		}
	}

	leaderless := func() bool {
		for _, s := range alive {
			if s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, "KV_"+events.LeaseBucket(stalled)) {
				return false
			}
		}
		return true
	}
	cluster.CutOff(victim)
	cut := time.Now()

	// Acquire and release until the stalled shard has a leader again, counting the grants
	// made while it had none both before and after the request.
	// The longest gap between successful acquires and the time without a leader are logged
	// for docs/leases.md, never asserted.
	granted, duringStall := 0, 0
	last, gap, stallEnd := cut, time.Duration(0), time.Time{}
	for attempt := 0; attempt < 2000; attempt++ {
		before := leaderless()
		if !before && duringStall > 0 {
			stallEnd = time.Now()
			break
		}
		g, rep := acquire()
		after := leaderless()
		if rep.code != 0 {
			continue // a 500 while everything this acquire tried was stalled: crawlers retry
		}
		granted++
		gap, last = max(gap, time.Since(last)), time.Now()
		inStalled := lstore.Leases.Index(g.Proxy) == stalled
		release(g.ID)
		if inStalled {
			// A slot write commits only through a leader: the shard had one for a moment
			// between the two looks (an election can finish and the leader be looked for
			// while it is still taking office), so the stall is over for this shard.
			if duringStall > 0 {
				stallEnd = time.Now()
				break
			}
			continue
		}
		if before && after {
			duringStall++
		}
	}
	if stallEnd.IsZero() {
		stallEnd = time.Now()
	}
	t.Logf("%d acquires granted, %d of them while shard %d had no leader (for about %v); longest gap between grants %v",
		granted, duringStall, stalled, stallEnd.Sub(cut).Round(10*time.Millisecond), gap.Round(time.Millisecond))
	if duringStall == 0 {
		t.Fatal("no acquire was granted while the shard had no leader")
	}

	// The lease in the stalled shard is renewable again (it was never lost).
	for deadline := time.Now().Add(3 * time.Minute); leaderless(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("shard %d still has no leader %v after the cut", stalled, time.Since(cut).Round(time.Second))
		}
	}
	var renewed bool
	for try := 0; try < 100 && !renewed; try++ {
		m, err := crawler.Request(events.LeaseRenewSubject, []byte(`{"id":"`+kept.ID+`"}`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rep := decodeReply(t, m)
		switch rep.code {
		case 0:
			renewed = true
		case events.CodeInternal: // the shard's write timed out: the client retries within the TTL
			time.Sleep(100 * time.Millisecond)
		default:
			t.Fatalf("renew %s after the failover: %d %s", kept.ID, rep.code, rep.err.Message)
		}
	}
	if !renewed {
		t.Fatalf("%s was not renewed after the failover", kept.ID)
	}

	// No proxy over its cap: a slot number at or above maxLeases, or a slot in a shard that
	// is not the proxy's, is what an overcommit would take. (Read key by key: a direct get is
	// served by any replica, while a listing needs a consumer the meta leader places.)
	for _, name := range names {
		for i, kv := range lstore.Leases.All() {
			for slot := range maxLeases + 1 {
				key := fmt.Sprintf("%s.%d", name, slot)
				gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
				_, _, err := kvstore.Get(gctx, kv, key)
				gcancel()
				switch {
				case errors.Is(err, kvstore.ErrNotFound):
				case err != nil:
					t.Fatalf("read %s/%s: %v", kv.Bucket(), key, err)
				case slot >= maxLeases || i != lstore.Leases.Index(name):
					t.Errorf("slot %s held in %s: over %s's cap of %d", key, kv.Bucket(), name, maxLeases)
				}
			}
		}
	}
}

// connectTo opens a connection to s alone, closed when the test ends.
func connectTo(t *testing.T, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.DontRandomize(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
