package provisioner_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/schemas"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/nats-io/nats.go"
)

type rig struct {
	t       *testing.T
	nc      *nats.Conn
	store   *kvstore.Store
	fake    *providertest.Fake
	results chan events.OpResult
}

func newRig(t *testing.T) *rig { return newRigWith(t, nil, provisioner.Checks{}) }

func newRigWith(t *testing.T, backend providers.Provider, checks provisioner.Checks) *rig {
	_, nc, js := kvstoretest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, nc: nc, store: store, fake: providertest.NewFake("fake", providers.Host{Name: "h1", MaxConcurrentOps: 2}),
		results: collectResults(t, nc)}
	if backend == nil {
		backend = r.fake
	}
	p, err := provisioner.New(provisioner.Config{Provider: "fake", Backend: backend, Catalog: r.fake.Catalog(), Checks: checks,
		Installation: "inst", Worker: "w1", Buckets: provisioner.BucketsOf(store), Timings: testTimings})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(ctx, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			t.Errorf("provisioner: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// testTimings are the provisioner's waits, shortened for tests.
var testTimings = provisioner.Timings{LockTTL: 2 * time.Second, Heartbeat: 500 * time.Millisecond, CreateBudget: 10 * time.Second,
	CallBudget: 5 * time.Second, LockBusyWait: 200 * time.Millisecond, FetchWait: 500 * time.Millisecond}

// collectResults hands the test every op result published on nc until it ends.
func collectResults(t *testing.T, nc *nats.Conn) chan events.OpResult {
	results := make(chan events.OpResult, 16)
	sub, err := nc.Subscribe(events.OpResultSubjects, func(m *nats.Msg) {
		var ev events.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Op != nil {
			results <- *ev.Op
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return results
}

func (r *rig) publish(op events.Op) {
	r.t.Helper()
	b, _ := json.Marshal(op)
	if _, err := r.store.JS.Publish(context.Background(), events.OpSubject("fake", "h1", op.Proxy), b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) result() events.OpResult {
	r.t.Helper()
	select {
	case res := <-r.results:
		return res
	case <-time.After(10 * time.Second):
		r.t.Fatal("no op result within 10s")
		return events.OpResult{}
	}
}

func createOp(r *rig, proxy, spec string) events.Op {
	r.t.Helper()
	if _, err := r.store.Proxies.Put(context.Background(), proxy, []byte(spec)); err != nil {
		r.t.Fatal(err)
	}
	s, err := schemas.ParseProxySpec([]byte(spec))
	if err != nil {
		r.t.Fatal(err)
	}
	return events.Op{V: 1, ID: "op-" + proxy, Kind: events.OpCreate, Proxy: proxy, Provider: "fake", Host: "h1", UID: "uid-" + proxy,
		InstanceName: providers.InstanceName("inst", "uid-"+proxy), SpecHash: s.Hash([]byte(s.CloudInit)), IssuedAt: time.Now()}
}

func TestCreateDeliversTheSpec(t *testing.T) {
	r := newRig(t)
	op := createOp(r, "p1", `{"provider":"fake","port":8080,"cloudInit":"#!/bin/sh\necho hi\n","auth":{"username":"u","password":"pw"}}`)
	r.publish(op)
	res := r.result()
	if res.ErrorClass != events.ClassNone || !res.Final || res.Instance == nil || res.Instance.State != "Running" || res.OpID != op.ID {
		t.Fatalf("result %+v", res)
	}
	req, ok := r.fake.Request(op.InstanceName)
	if !ok || string(req.UserData) != "#!/bin/sh\necho hi\n" || req.Port != 8080 || req.Auth == nil || req.Auth.Password.Reveal() != "pw" || req.Installation != "inst" || req.Attempt != op.ID {
		t.Fatalf("the provider got %+v", req)
	}
}

func TestStaleCreateIsDropped(t *testing.T) {
	r := newRig(t)
	op := createOp(r, "p1", `{"provider":"fake"}`)
	op.SpecHash = "not-the-hash"
	r.publish(op)
	if res := r.result(); res.ErrorClass != events.ClassStale || !res.Final {
		t.Fatalf("result %+v", res)
	}
	if n := r.fake.Calls("create"); n != 0 {
		t.Fatalf("a stale op called Create %d times", n)
	}
}

func TestMalformedOpIsTerminated(t *testing.T) {
	r := newRig(t)
	if _, err := r.store.JS.Publish(context.Background(), events.OpSubject("fake", "h1", "p1"), []byte(`{"v":1,"kind":`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := r.store.JS.Stream(context.Background(), events.OpsStream("fake"))
		if err != nil {
			t.Fatal(err)
		}
		if info.CachedInfo().State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the malformed op is still in the work queue")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.fake.Calls("create")+r.fake.Calls("get")+r.fake.Calls("delete") != 0 {
		t.Fatal("a malformed op reached the provider")
	}
}

// While another worker holds the proxy's op lock, the op waits; it runs once the lock goes.
func TestOpLockSerialisesAProxy(t *testing.T) {
	r := newRig(t)
	lock, err := kvstore.AcquireLock(context.Background(), r.store.JS, r.store.Locks, events.OpLockKey("p1"), "other", "test", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.publish(createOp(r, "p1", `{"provider":"fake"}`))
	// Redelivered means the worker took the op, met the lock and put it back: without the
	// lock it would have run Create on that first delivery.
	cons, err := r.store.JS.Consumer(context.Background(), events.OpsStream("fake"), events.HostConsumer("h1"))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumRedelivered > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the op was never delivered twice: %+v", info)
		}
	}
	if n := r.fake.Calls("create"); n != 0 {
		t.Fatalf("Create ran %d times while another worker held the lock", n)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res := r.result(); res.ErrorClass != events.ClassNone {
		t.Fatalf("result %+v", res)
	}
}

// A delete whose create result was lost carries no instance ID: the provisioner finds the
// instance by name and UID, deletes it, and reports NotFound once it is gone.
func TestDeleteWithoutIDFindsTheInstance(t *testing.T) {
	r := newRig(t)
	op := createOp(r, "p1", `{"provider":"fake"}`)
	r.publish(op)
	r.result()
	del := op
	del.ID, del.Kind, del.InstanceID = "del-1", events.OpDelete, ""
	r.publish(del)
	if res := r.result(); res.ErrorClass != events.ClassNotFound || res.Kind != events.OpDelete {
		t.Fatalf("result %+v", res)
	}
	if list, _ := r.fake.List(context.Background()); len(list) != 0 {
		t.Fatalf("instances left: %+v", list)
	}
}

// Transient errors are retried by redelivery and reported as non-final until one succeeds.
func TestTransientErrorsAreRetried(t *testing.T) {
	r := newRig(t)
	r.fake.Fail("create", providers.ErrTransient, 2)
	r.publish(createOp(r, "p1", `{"provider":"fake"}`))
	for i := 1; i <= 2; i++ {
		res := r.result()
		if res.ErrorClass != events.ClassTransient || res.Final || res.Attempt != i {
			t.Fatalf("attempt %d: %+v", i, res)
		}
	}
	if res := r.result(); res.ErrorClass != events.ClassNone || !res.Final || res.Attempt != 3 {
		t.Fatalf("final: %+v", res)
	}
}

// A permanent error is final at once and the message is not redelivered.
func TestPermanentErrorsAreFinal(t *testing.T) {
	r := newRig(t)
	r.fake.Fail("create", providers.ErrPermanent, 1)
	r.publish(createOp(r, "p1", `{"provider":"fake"}`))
	if res := r.result(); res.ErrorClass != events.ClassPermanent || !res.Final {
		t.Fatalf("result %+v", res)
	}
	select {
	case res := <-r.results:
		t.Fatalf("the op ran again: %+v", res)
	case <-time.After(1500 * time.Millisecond):
	}
}
