package providertest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/providers"
)

// The reconciler retries Create after any failure, so a second Create must find the first
// instance rather than make a twin or rewrite its marks.
func testCreateIsIdempotent(e *env) {
	req := e.request("idem")
	first := e.create(req)
	before := e.get(first.ID)
	again := e.create(req)
	if again.ID != first.ID {
		e.t.Errorf("second Create(%s) returned ID %q, first returned %q", req.Name, again.ID, first.ID)
	}
	after := e.get(first.ID)
	if !after.Marks.CreatedAt.Equal(before.Marks.CreatedAt) {
		e.t.Errorf("second Create rewrote CreatedAt from %v to %v", before.Marks.CreatedAt, after.Marks.CreatedAt)
	}
	if !after.Marks.ExpiresAt.Equal(before.Marks.ExpiresAt) {
		e.t.Errorf("second Create rewrote ExpiresAt from %v to %v", before.Marks.ExpiresAt, after.Marks.ExpiresAt)
	}
	if n := named(e.list(), req.Name); n != 1 {
		e.t.Errorf("List shows %d instances named %s after two Creates, want 1", n, req.Name)
	}
}

// A Stopped answer makes the reconciler delete and recreate, so reporting a starting instance
// as Stopped would loop forever; Running without an address gives probes nothing to dial.
func testRunningHasAddress(e *env) {
	req := e.request("running")
	inst := e.create(req)
	got := e.get(inst.ID)
	for _, c := range []struct {
		when string
		inst providers.Instance
	}{{"Create", inst}, {"Get right after Create", got}} {
		switch c.inst.State {
		case providers.StateRunning:
		case providers.StateProvisioning:
			if e.h.Settle == nil {
				e.t.Errorf("%s reported Provisioning; a provider whose Create returns before Running needs Harness.Settle", c.when)
			}
		default:
			e.t.Errorf("%s reported a new instance %s, want Provisioning or Running", c.when, c.inst.State)
		}
	}
	if inst.State == providers.StateRunning {
		e.checkServing(inst, req)
	}
	e.settle(inst, req)
}

// GC and the reconciler trust the marks after a restart, so they must come from the
// backend: Reopen builds a provider with nothing in memory and must see the same.
func testMarksReadBack(e *env) { marksReadBack(e, e.request("marks")) }

// The lifetime's end is a mark like the others (decision 0076): written by Create, read back
// by Get and List, and from the backend after a restart.
func testLifetimeMarkReadBack(e *env) {
	req := e.request("lifetime")
	req.Lifetime = 90 * time.Minute
	marksReadBack(e, req)
}

func marksReadBack(e *env, req providers.CreateRequest) {
	start := time.Now()
	inst := e.settle(e.create(req), req)
	end := time.Now()

	got := e.get(inst.ID)
	checkMarks(e, "Get", got.Marks, req, start, end)
	listed, ok := find(e.list(), inst.ID)
	if !ok {
		e.t.Fatalf("List does not show %s", inst.ID)
	}
	checkMarks(e, "List", listed.Marks, req, start, end)
	if !sameMarks(got.Marks, listed.Marks) {
		e.t.Errorf("Get marks %+v differ from List marks %+v", got.Marks, listed.Marks)
	}

	if e.h.Reopen == nil {
		e.t.Log("Harness.Reopen is nil: marks are not proven to be read back from the backend")
		return
	}
	reopened := &checked{t: e.t, p: e.h.Reopen(e.t, e.raw)}
	again, err := reopened.Get(e.ctx, inst.ID)
	if err != nil {
		e.t.Fatalf("reopened Get(%s): %v", inst.ID, err)
	}
	if !sameMarks(again.Marks, got.Marks) {
		e.t.Errorf("reopened Get marks %+v, want %+v", again.Marks, got.Marks)
	}
	if again.State != got.State || again.Address != got.Address || again.Port != got.Port {
		e.t.Errorf("reopened Get = %s %s:%d, want %s %s:%d", again.State, again.Address, again.Port, got.State, got.Address, got.Port)
	}
	list, err := reopened.List(e.ctx)
	if err != nil {
		e.t.Fatalf("reopened List: %v", err)
	}
	if relisted, ok := find(list, inst.ID); !ok {
		e.t.Errorf("reopened List does not show %s", inst.ID)
	} else if !sameMarks(relisted.Marks, got.Marks) {
		e.t.Errorf("reopened List marks %+v, want %+v", relisted.Marks, got.Marks)
	}
}

func checkMarks(e *env, where string, m providers.Marks, req providers.CreateRequest, start, end time.Time) {
	e.t.Helper()
	if !m.Managed {
		e.t.Errorf("%s: Marks.Managed is false", where)
	}
	if m.UID != req.UID {
		e.t.Errorf("%s: Marks.UID = %q, want %q", where, m.UID, req.UID)
	}
	if m.Installation != req.Installation {
		e.t.Errorf("%s: Marks.Installation = %q, want %q", where, m.Installation, req.Installation)
	}
	switch {
	case m.CreatedAt.IsZero():
		// Zero reads as "very old", which would let GC delete a brand-new instance.
		e.t.Errorf("%s: Marks.CreatedAt is zero", where)
	case m.CreatedAt.Before(start.Add(-clockSlack)) || m.CreatedAt.After(end.Add(clockSlack)):
		e.t.Errorf("%s: Marks.CreatedAt = %v, want within %v of [%v, %v]", where, m.CreatedAt, clockSlack, start, end)
	}
	// The collector deletes an instance whose ExpiresAt has passed, live proxy or not: it must
	// be exactly the creation mark plus the lifetime asked for, and absent without one.
	if want := providers.ExpiryOf(m.CreatedAt, req.Lifetime); !m.ExpiresAt.Equal(want) {
		e.t.Errorf("%s: Marks.ExpiresAt = %v, want %v (CreatedAt %v + Lifetime %v)", where, m.ExpiresAt, want, m.CreatedAt, req.Lifetime)
	}
}

func sameMarks(a, b providers.Marks) bool {
	return a.Managed == b.Managed && a.UID == b.UID && a.Installation == b.Installation &&
		a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

// The reconciler deletes until it sees NotFound, and retries Delete after crashes, so
// Delete must be idempotent and NotFound must follow it.
func testDeleteIsIdempotent(e *env) {
	req := e.request("delete")
	inst := e.create(req)
	e.delete(inst.ID)
	e.gone(inst.ID)
	e.delete(inst.ID)

	other := providers.InstanceName(installation, req.UID+"-never")
	if strings.Count(inst.ID, req.Name) != 1 {
		e.t.Logf("ID %q does not hold the name once; skipping the never-created ID checks", inst.ID)
		return
	}
	never := strings.Replace(inst.ID, req.Name, other, 1)
	if _, err := e.p.Get(e.ctx, never); !errors.Is(err, providers.ErrNotFound) {
		e.t.Errorf("Get(%s) of a never-created ID = %v, want ErrNotFound", never, err)
	}
	if err := e.p.Delete(e.ctx, never); err != nil {
		e.t.Errorf("Delete(%s) of a never-created ID = %v, want success", never, err)
	}
}

// An ID that cannot be resolved will never work, so retrying it would pin a worker forever.
func testMalformedIDIsPermanent(e *env) {
	ids := []string{"", "garbage", "a/b/c/d/e", "/", "//", " "}
	for _, id := range e.h.MalformedIDs {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if _, err := e.p.Get(e.ctx, id); !errors.Is(err, providers.ErrPermanent) {
			e.t.Errorf("Get(%q) = %v, want ErrPermanent", id, err)
		}
		if err := e.p.Delete(e.ctx, id); !errors.Is(err, providers.ErrPermanent) {
			e.t.Errorf("Delete(%q) = %v, want ErrPermanent", id, err)
		}
	}
}

// GC deletes what List returns that no live proxy owns, so List must show only marked
// instances, with the marks of the request that made them, and forget deleted ones.
func testListOnlyMarked(e *env) {
	reqA, reqB := e.request("list-a"), e.request("list-b")
	a, b := e.create(reqA), e.create(reqB)
	list := e.list()
	for _, c := range []struct {
		inst providers.Instance
		req  providers.CreateRequest
	}{{a, reqA}, {b, reqB}} {
		got, ok := find(list, c.inst.ID)
		if !ok {
			e.t.Errorf("List does not show %s", c.inst.ID)
			continue
		}
		if got.Name != c.req.Name || got.Marks.UID != c.req.UID || got.Marks.Installation != c.req.Installation {
			e.t.Errorf("List shows %s as name %q uid %q installation %q, want %q %q %q", c.inst.ID,
				got.Name, got.Marks.UID, got.Marks.Installation, c.req.Name, c.req.UID, c.req.Installation)
		}
	}

	if e.h.PlantUnmarked != nil {
		foreign := e.h.PlantUnmarked(e.t, e.raw)
		e.track(foreign)
		if n := named(e.list(), foreign); n != 0 {
			e.t.Errorf("List shows the unmarked instance %s", foreign)
		}
	}

	e.delete(a.ID)
	ok, why := e.eventually(func() (bool, string) {
		list := e.list()
		if _, found := find(list, a.ID); found {
			return false, fmt.Sprintf("List still shows %s after Delete", a.ID)
		}
		if _, found := find(list, b.ID); !found {
			return false, fmt.Sprintf("List lost %s after deleting %s", b.ID, a.ID)
		}
		return true, ""
	})
	if !ok {
		e.t.Error(why)
	}
}
