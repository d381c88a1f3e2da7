package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/local"
	"github.com/egressd/egressd/workers/provisioner"
)

// installation is one egressd installation for the GC test: its own NATS server, its own
// installation ID, and a local provider over a state directory it shares with the other.
type installation struct {
	id    string
	store *kvstore.Store
	prov  *local.Provider
	p     *provisioner.Provisioner
}

func newInstallation(t *testing.T, id, stateDir string, net int, minAge time.Duration) *installation {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	prov, err := local.New("local", local.Config{StateDir: stateDir, Binary: egressdBin,
		Addresses: []string{fmt.Sprintf("127.0.%d.2-127.0.%d.60", net, net)}}, log)
	if err != nil {
		t.Fatal(err)
	}
	p, err := provisioner.New(provisioner.Config{Provider: "local", Backend: prov, Catalog: prov.Catalog(), Installation: id,
		Worker: id, Buckets: provisioner.BucketsOf(store), Log: log, GC: provisioner.GC{Interval: time.Second, MinAge: minAge}})
	if err != nil {
		t.Fatal(err)
	}
	return &installation{id: id, store: store, prov: prov, p: p}
}

// create makes an instance for uid; live ones also get a status, as the reconciler would write.
func (in *installation) create(t *testing.T, uid string, live bool) providers.Instance {
	t.Helper()
	ctx := context.Background()
	name := providers.InstanceName(in.id, uid)
	inst, err := in.prov.Create(ctx, providers.CreateRequest{Name: name, UID: uid, Installation: in.id, Proxy: uid, Host: "local", Port: 3128})
	if err != nil {
		t.Fatal(err)
	}
	if live {
		if _, err := kvstore.PutJSON(ctx, in.store.Status, uid, events.ProxyStatus{V: 1, Phase: events.PhaseRunning, UID: uid}); err != nil {
			t.Fatal(err)
		}
	}
	return inst
}

func (in *installation) sweep(t *testing.T) {
	t.Helper()
	time.Sleep(1100 * time.Millisecond) // past the previous round's GC lock
	if err := in.p.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func exists(t *testing.T, p *local.Provider, inst providers.Instance) bool {
	_, err := p.Get(context.Background(), inst.ID)
	return err == nil
}

// Two installations share one local state directory: each collects only its own orphans, a
// live proxy is never collected, and a young orphan waits for the minimum age.
func TestGCTwoInstallationsShareAStateDir(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "local")
	defer killProcs(t, stateDir)
	const minAge = 4 * time.Second
	a := newInstallation(t, "inst-a", stateDir, 31, minAge)
	b := newInstallation(t, "inst-b", stateDir, 31, minAge)
	aLive, aOrphan := a.create(t, "a-live", true), a.create(t, "a-orphan", false)
	bLive, bOrphan := b.create(t, "b-live", true), b.create(t, "b-orphan", false)
	time.Sleep(minAge)
	youngAt := time.Now() // before its createdAt: its age at the sweep is at most the time since
	aYoung := a.create(t, "a-young", false)

	a.sweep(t)
	// On a machine stalled for seconds the young orphan may have grown old before the sweep;
	// then its collection is right, and only the others are checked.
	type want struct {
		what string
		inst providers.Instance
		want bool
	}
	cases := []want{{"a's live proxy", aLive, true}, {"a's old orphan", aOrphan, false},
		{"b's live proxy", bLive, true}, {"b's orphan", bOrphan, true}}
	if since := time.Since(youngAt); since < minAge {
		cases = append(cases, want{"a's young orphan", aYoung, true})
	} else {
		t.Logf("the sweep ended %v after the young orphan's create, past minAge: not checked", since)
	}
	for _, c := range cases {
		if got := exists(t, a.prov, c.inst); got != c.want {
			t.Errorf("after a's sweep, %s exists = %v, want %v", c.what, got, c.want)
		}
	}
	time.Sleep(minAge)
	a.sweep(t)
	if exists(t, a.prov, aYoung) {
		t.Error("a's orphan was not collected once it was old enough")
	}
	b.sweep(t)
	if exists(t, b.prov, bOrphan) || !exists(t, b.prov, bLive) || !exists(t, a.prov, aLive) {
		t.Error("b's sweep: wrong instances collected")
	}
	for _, in := range []providers.Instance{aLive, bLive} {
		_ = a.prov.Delete(context.Background(), in.ID)
	}
	if ents, _ := os.ReadDir(stateDir); len(proxyProcs(t, stateDir)) != 0 {
		t.Errorf("processes left; state dir holds %d entries", len(ents))
	}
}
