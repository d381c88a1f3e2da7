package providertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/egressd/egressd/providers"
)

// Callers set no deadline of their own; a provider that ignores a cancelled context pins a
// worker (or stalls GC for every provider) until the backend answers.
func testCancelledContextReturns(e *env) {
	live := e.create(e.request("cancel-live"))
	fresh := e.request("cancel-new")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	for _, c := range []struct {
		op       string
		mustFail bool
		call     func() error
	}{
		{"Create", true, func() error { _, err := e.p.Create(ctx, fresh); return err }},
		{"Get", true, func() error { _, err := e.p.Get(ctx, live.ID); return err }},
		{"List", true, func() error { _, err := e.p.List(ctx); return err }},
		// A cancelled Delete may or may not have deleted; it only must not hang.
		{"Delete", false, func() error { return e.p.Delete(ctx, live.ID) }},
	} {
		ok, err := returns(c.call)
		switch {
		case !ok:
			e.t.Errorf("%s with a cancelled context did not return within %v", c.op, hangLimit)
		case c.mustFail && err == nil:
			e.t.Errorf("%s with a cancelled context succeeded, want an error", c.op)
		}
	}
}

// Three reconciles, GC and a health round may all touch one name at once; the provider must
// come out of it with at most one instance for the name, and usable.
func testConcurrentCreateDeleteSameName(e *env) {
	const workers = 8
	req := e.request("race")
	first := e.create(req)

	var latest atomic.Value
	latest.Store(first.ID)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range workers {
		wg.Go(func() {
			<-start
			inst, err := e.p.Create(e.ctx, req)
			if err != nil {
				tolerateTransient(e, "Create", err)
				return
			}
			latest.Store(inst.ID)
		})
		wg.Go(func() {
			<-start
			if err := e.p.Delete(e.ctx, latest.Load().(string)); err != nil {
				tolerateTransient(e, "Delete", err)
			}
		})
	}
	close(start)
	wg.Wait()

	final := e.settle(e.create(req), req)
	ok, why := e.eventually(func() (bool, string) {
		n := named(e.list(), req.Name)
		return n == 1, fmt.Sprintf("List shows %d instances named %s after the race and a final Create, want 1", n, req.Name)
	})
	if !ok {
		e.t.Error(why)
	}
	e.delete(final.ID)
	ok, why = e.eventually(func() (bool, string) {
		n := named(e.list(), req.Name)
		return n == 0, fmt.Sprintf("List shows %d instances named %s after the final Delete, want 0", n, req.Name)
	})
	if !ok {
		e.t.Error(why)
	}
}

// Contention may make a call fail for now, but nothing about a race is permanent.
func tolerateTransient(e *env, op string, err error) {
	if !errors.Is(err, providers.ErrTransient) {
		e.t.Errorf("concurrent %s failed with class %q, want success or ErrTransient: %v", op, providers.ClassOf(err), err)
	}
}

// Address allocation must be atomic: two proxies on one address:port would mean one of them
// is unreachable and its clients are served by the other.
func testConcurrentCreatesDoNotCollide(e *env) {
	const n = 8
	reqs := make([]providers.CreateRequest, n)
	for i := range reqs {
		reqs[i] = e.request("many-" + strconv.Itoa(i))
	}
	insts := make([]providers.Instance, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() { insts[i], errs[i] = e.p.Create(e.ctx, reqs[i]) })
	}
	wg.Wait()

	ids := map[string]string{}
	endpoints := map[string]string{}
	for i, inst := range insts {
		if errs[i] != nil {
			e.t.Errorf("concurrent Create(%s): %v", reqs[i].Name, errs[i])
			continue
		}
		inst = e.settle(inst, reqs[i])
		if prev, dup := ids[inst.ID]; dup {
			e.t.Errorf("%s and %s got the same ID %s", prev, reqs[i].Name, inst.ID)
		}
		ids[inst.ID] = reqs[i].Name
		ep := net.JoinHostPort(inst.Address, strconv.Itoa(inst.Port))
		if prev, dup := endpoints[ep]; dup {
			e.t.Errorf("%s and %s both serve on %s", prev, reqs[i].Name, ep)
		}
		endpoints[ep] = reqs[i].Name
	}
}
