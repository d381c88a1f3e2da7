package providertest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
)

const (
	// installation is the suite's own installation ID, used only to derive unique names.
	installation = "providertest"
	// subtestBudget bounds a whole subtest so a hung provider fails it instead of the run.
	subtestBudget = 2 * time.Minute
	// cleanupBudget bounds the deletes that tidy up after a subtest.
	cleanupBudget = 30 * time.Second
	// hangLimit is how long a call with a cancelled context may take before it counts as hung.
	hangLimit = 10 * time.Second
	// clockSlack allows for backends that store CreatedAt coarsely or on another clock.
	clockSlack = 2 * time.Minute
	pollEvery  = 50 * time.Millisecond
)

var (
	// runID keeps names unique across runs that share a backend and leave debris behind.
	runID  = strconv.FormatInt(time.Now().UnixNano(), 36)
	uidSeq atomic.Int64
)

// env is one subtest's provider and the helpers every subtest shares. Helpers that fail
// fatally are for the test goroutine only; goroutines call e.p directly and use Errorf.
type env struct {
	t   *testing.T
	h   *Harness
	raw providers.Provider // as built, for the harness's own hooks
	p   providers.Provider // raw behind the checks every answer must pass
	ctx context.Context

	mu    sync.Mutex
	names []string // every name this subtest asked for, so cleanup finds leftovers
}

func open(t *testing.T, h *Harness) *env {
	t.Helper()
	raw := h.New(t)
	if raw == nil {
		t.Fatal("Harness.New returned nil")
	}
	ctx, cancel := context.WithTimeout(t.Context(), subtestBudget)
	t.Cleanup(cancel)
	e := &env{t: t, h: h, raw: raw, p: &checked{t: t, p: raw}, ctx: ctx}
	// Registered after New, so it runs before the harness tears the provider down.
	t.Cleanup(e.removeLeftovers)
	return e
}

// request returns a valid request for a fresh name, with the sentinels in place.
func (e *env) request(label string) providers.CreateRequest {
	e.t.Helper()
	uid := fmt.Sprintf("pt-%s-%s-%d", runID, label, uidSeq.Add(1))
	name := providers.InstanceName(installation, uid)
	req := e.h.Request(e.t, name, uid)
	if req.Name != name || req.UID != uid {
		e.t.Fatalf("Harness.Request(%q, %q) returned Name %q, UID %q; it must keep both", name, uid, req.Name, req.UID)
	}
	req.UserData = withSentinel(req.UserData)
	auth := providers.Auth{Username: "providertest"}
	if req.Auth != nil {
		auth = *req.Auth
	}
	auth.Password = SentinelPassword
	req.Auth = &auth
	e.track(name)
	return req
}

func withSentinel(ud providers.UserData) providers.UserData {
	if len(ud) == 0 {
		return providers.UserData("#cloud-config\n# " + SentinelUserData + "\n")
	}
	out := slices.Clone(ud)
	if out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, "# "+SentinelUserData+"\n"...)
}

func (e *env) track(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.names = append(e.names, name)
}

func (e *env) removeLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupBudget)
	defer cancel()
	list, err := e.raw.List(ctx)
	if err != nil {
		e.t.Logf("cleanup: List: %v", err)
		return
	}
	e.mu.Lock()
	names := slices.Clone(e.names)
	e.mu.Unlock()
	for _, inst := range list {
		if slices.Contains(names, inst.Name) {
			if err := e.raw.Delete(ctx, inst.ID); err != nil {
				e.t.Logf("cleanup: Delete(%s): %v", inst.ID, err)
			}
		}
	}
}

func (e *env) create(req providers.CreateRequest) providers.Instance {
	e.t.Helper()
	inst, err := e.p.Create(e.ctx, req)
	if err != nil {
		e.t.Fatalf("Create(%s): %v", req.Name, err)
	}
	if inst.ID == "" {
		e.t.Fatalf("Create(%s) returned no ID", req.Name)
	}
	if inst.Name != req.Name {
		e.t.Errorf("Create(%s) returned an instance named %q", req.Name, inst.Name)
	}
	return inst
}

func (e *env) get(id string) providers.Instance {
	e.t.Helper()
	inst, err := e.p.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("Get(%s): %v", id, err)
	}
	return inst
}

func (e *env) list() []providers.Instance {
	e.t.Helper()
	list, err := e.p.List(e.ctx)
	if err != nil {
		e.t.Fatalf("List: %v", err)
	}
	return list
}

func (e *env) delete(id string) {
	e.t.Helper()
	if err := e.p.Delete(e.ctx, id); err != nil {
		e.t.Fatalf("Delete(%s): %v", id, err)
	}
}

// settle returns the instance once Running, through Harness.Settle when the provider needs
// it, and checks it serves on the requested port.
func (e *env) settle(inst providers.Instance, req providers.CreateRequest) providers.Instance {
	e.t.Helper()
	if e.h.Settle != nil {
		inst = e.h.Settle(e.t, e.raw, inst.ID)
	} else {
		inst = e.get(inst.ID)
	}
	e.checkServing(inst, req)
	return inst
}

func (e *env) checkServing(inst providers.Instance, req providers.CreateRequest) {
	e.t.Helper()
	if inst.State != providers.StateRunning {
		e.t.Errorf("%s settled in state %s, want Running", inst.ID, inst.State)
	}
	if inst.Address == "" {
		e.t.Errorf("%s is Running without an address", inst.ID)
	} else if !isIP(inst.Address) {
		e.t.Errorf("%s has address %q, want an IP", inst.ID, inst.Address)
	}
	if inst.Port != req.Port {
		e.t.Errorf("%s serves on port %d, want the requested %d", inst.ID, inst.Port, req.Port)
	}
}

// eventually retries cond until it holds or Harness.DeleteWait has passed, trying it at
// least once; it returns cond's last explanation when it never held.
func (e *env) eventually(cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(e.h.DeleteWait)
	for {
		ok, why := cond()
		if ok || !time.Now().Before(deadline) {
			return ok, why
		}
		select {
		case <-e.ctx.Done():
			return false, why
		case <-time.After(pollEvery):
		}
	}
}

// gone waits until Get reports id as ErrNotFound.
func (e *env) gone(id string) {
	e.t.Helper()
	ok, why := e.eventually(func() (bool, string) {
		inst, err := e.p.Get(e.ctx, id)
		if errors.Is(err, providers.ErrNotFound) {
			return true, ""
		}
		return false, fmt.Sprintf("Get(%s) after Delete = (%s, %v), want ErrNotFound", id, inst.State, err)
	})
	if !ok {
		e.t.Error(why)
	}
}

// named counts the listed instances called name.
func named(list []providers.Instance, name string) int {
	n := 0
	for _, inst := range list {
		if inst.Name == name {
			n++
		}
	}
	return n
}

func find(list []providers.Instance, id string) (providers.Instance, bool) {
	for _, inst := range list {
		if inst.ID == id {
			return inst, true
		}
	}
	return providers.Instance{}, false
}

// returns reports whether f returned within hangLimit, and what it returned.
func returns(f func() error) (bool, error) {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return true, err
	case <-time.After(hangLimit):
		return false, nil
	}
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}
