package leaser_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats.go/jetstream"
)

// A replica's watch of a lease shard stands still when the consumer behind it is gone (the
// server that held it died): the SDK notices only at its next activity check, up to 10 s
// later, and needs the meta leader to make a new one. Meanwhile a release made elsewhere
// never reaches the view, which counts the slot held and answers "no proxy available". The
// replica notices that its own write (a renewal) does not come back, reads the shard's
// full proxies directly, and grants the freed slot while the watch still stands still
// (decision 100).
func TestAViewThatStandsStillReadsItsShardDirectly(t *testing.T) {
	obs := &freshnessCalls{}
	r := newRig(t, func(c *leaser.Config) { c.Observer = obs })
	r.seed(proxy{name: "p1", maxLeases: 2})
	r.startLeasers(1)
	first := r.mustAcquire(events.AcquireRequest{TTLSeconds: 600})
	second := r.mustAcquire(events.AcquireRequest{TTLSeconds: 600})
	if _, rep := r.acquire(events.AcquireRequest{}); rep.code != events.CodeUnavailable {
		t.Fatalf("a third acquire on a proxy of two slots: %d, want 503", rep.code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := jetstream.New(r.nc)
	kv := r.store.Leases.Of("p1")
	stream, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() []string {
		var names []string
		lister := stream.ConsumerNames(ctx)
		for name := range lister.Name() {
			names = append(names, name)
		}
		if err := lister.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	watches := consumers()
	if len(watches) == 0 {
		t.Fatal("no consumer on the shard: where is the replica's watch?")
	}
	for _, name := range watches {
		if err := stream.DeleteConsumer(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	// Another replica's release, as the bucket has it; then this replica's own write.
	proxy, slot, _ := strings.Cut(first.ID, ".")
	slot, _, _ = strings.Cut(slot, ".")
	if err := kv.Delete(ctx, proxy+"."+slot); err != nil {
		t.Fatal(err)
	}
	if rep := r.call(events.LeaseRenewSubject, events.RenewRequest{ID: second.ID}); rep.code != 0 {
		t.Fatalf("renew %s: %d %s", second.ID, rep.code, rep.err.Message)
	}

	var granted events.LeaseGrant
	eventually(t, 8*time.Second, "the slot freed elsewhere granted", func() bool {
		g, rep := r.acquire(events.AcquireRequest{TTLSeconds: 600})
		granted = g
		return rep.code == 0
	})
	// The SDK makes a new consumer at its activity check, 10 s or more after the delete: by
	// then the grant above has long been made. Should it have come first (a machine stalled
	// for seconds), the watch may have brought the release, and the log and metrics need not
	// say anything.
	recreated := consumers()
	if len(recreated) > 0 {
		t.Logf("the SDK had made a new consumer (%v) by the grant: the watch may have brought the release", recreated)
	} else if !strings.Contains(r.logs.String(), "stands still") {
		t.Error("granted while the watch stood still, but the log does not say the view stood still")
	}
	if !strings.HasPrefix(granted.ID, proxy+"."+slot+".") {
		t.Errorf("granted %s, want the slot of %s", granted.ID, first.ID)
	}
	// The metrics hear of it: the shard standing still, and the reads.
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(recreated) == 0 && (!obs.still[kv.Bucket()] || obs.reads[kv.Bucket()+" ok"] == 0) {
		t.Errorf("observed: standing still %v, reads %v; want %s standing still and read", obs.still, obs.reads, kv.Bucket())
	}
}

// freshnessCalls is a leaser.Observer that keeps what it hears of views standing still.
type freshnessCalls struct {
	mu    sync.Mutex
	still map[string]bool
	reads map[string]int
}

func (*freshnessCalls) ObserveLease(string, string, time.Duration) {}

func (f *freshnessCalls) ObserveViewStill(bucket string, still bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.still == nil {
		f.still = map[string]bool{}
	}
	f.still[bucket] = f.still[bucket] || still
}

func (f *freshnessCalls) ObserveDirectRead(bucket, result string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reads == nil {
		f.reads = map[string]int{}
	}
	f.reads[bucket+" "+result]++
}
