package providertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
)

var fakeHosts = []providers.Host{{Name: "h1", MaxConcurrentOps: 2}, {Name: "h2", MaxConcurrentOps: 4}}

// fakeHarness runs the suite on Fakes, each seen through wrap (the identity for the real one).
func fakeHarness(wrap func(*Fake) providers.Provider) Harness {
	return Harness{
		New: func(t *testing.T) providers.Provider { return wrap(NewFake("fake", fakeHosts...)) },
		Request: func(t *testing.T, name, uid string) providers.CreateRequest {
			return fakeRequest(name, uid)
		},
		MalformedIDs: []string{"fake/h1", "fake//egress-x", "other/h1/egress-x", "fake/h1/egress-x/y",
			"fake/nohost/egress-x", "fake/h1/Upper", "fake/h1/-x"},
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider {
			return wrap(NewFakeOn(unwrapFake(t, p).Backend(), "fake", fakeHosts...))
		},
		PlantUnmarked: func(t *testing.T, p providers.Provider) string {
			unwrapFake(t, p).Backend().PutUnmarked("h1", "someone-elses-vm")
			return "someone-elses-vm"
		},
	}
}

func fakeRequest(name, uid string) providers.CreateRequest {
	return providers.CreateRequest{Name: name, UID: uid, Installation: "inst-1", Proxy: "p", Host: "h1", Port: 3128}
}

// fakeWrapper is implemented by the deliberately broken providers in broken_test.go.
type fakeWrapper interface{ fake() *Fake }

func unwrapFake(t *testing.T, p providers.Provider) *Fake {
	switch p := p.(type) {
	case *Fake:
		return p
	case fakeWrapper:
		return p.fake()
	}
	t.Fatalf("not a fake: %T", p)
	return nil
}

func TestFakeConformance(t *testing.T) {
	Run(t, fakeHarness(func(f *Fake) providers.Provider { return f }))
}

func TestFakeAddressesAreDeterministic(t *testing.T) {
	f := NewFake("fake", fakeHosts...)
	var got []string
	for i := range 256 {
		uid := fmt.Sprint(i)
		inst, err := f.Create(t.Context(), fakeRequest(providers.InstanceName("i", uid), uid))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, inst.Address)
	}
	for i, want := range map[int]string{0: "127.100.0.1", 253: "127.100.0.254", 254: "127.100.1.1", 255: "127.100.1.2"} {
		if got[i] != want {
			t.Errorf("instance %d got %s, want %s", i, got[i], want)
		}
	}
}

func TestFakeFail(t *testing.T) {
	backendErr := errors.New("backend said no")
	for _, c := range []struct {
		name      string
		err       error
		times     int
		wantClass error
		wantAs    bool // the backend error stays reachable
	}{
		{"class sentinel", providers.ErrQuota, 2, providers.ErrQuota, false},
		{"unclassified is transient", backendErr, 1, providers.ErrTransient, true},
		{"already classified", providers.Wrap(providers.ErrPermanent, "get", "x", "", backendErr), 1, providers.ErrPermanent, true},
		{"until cleared", providers.ErrTransient, -1, providers.ErrTransient, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := NewFake("fake", fakeHosts...)
			f.Fail("list", c.err, c.times)
			failures := c.times
			if failures < 0 {
				failures = 5
			}
			for i := range failures {
				_, err := f.List(t.Context())
				if providers.ClassOf(err) != c.wantClass {
					t.Fatalf("call %d: got %v, want class %v", i, err, c.wantClass)
				}
				if c.wantAs && !errors.Is(err, backendErr) {
					t.Errorf("call %d: backend error lost: %v", i, err)
				}
			}
			if c.times < 0 {
				f.Fail("list", nil, 0)
			}
			if _, err := f.List(t.Context()); err != nil {
				t.Errorf("after the injected failures: %v", err)
			}
			if _, err := f.Get(t.Context(), "fake/h1/egress-x"); !errors.Is(err, providers.ErrNotFound) {
				t.Errorf("a failure for list leaked into get: %v", err)
			}
		})
	}
}

func TestFakeDelayHonoursContext(t *testing.T) {
	f := NewFake("fake", fakeHosts...)
	f.Delay("get", time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.Get(ctx, "fake/h1/egress-x")
	if !errors.Is(err, providers.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want a Transient deadline error", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("Get waited %v despite its context", time.Since(start))
	}

	f.Delay("get", 30*time.Millisecond)
	start = time.Now()
	if _, err := f.Get(t.Context(), "fake/h1/egress-x"); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("got %v, want ErrNotFound after the delay", err)
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Errorf("Get returned after %v, before its delay", time.Since(start))
	}
}

func TestFakeSetStateAndRestart(t *testing.T) {
	f := NewFake("fake", fakeHosts...)
	req := fakeRequest(providers.InstanceName("i", "u"), "u")
	inst, err := f.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !f.SetState(req.Name, providers.StateStopped) {
		t.Fatal("SetState did not find the instance")
	}
	got, err := f.Get(t.Context(), inst.ID)
	if err != nil || got.State != providers.StateStopped || got.Address != "" {
		t.Errorf("Get after SetState(Stopped) = %+v, %v; want Stopped without an address", got, err)
	}
	again, err := f.Create(t.Context(), req)
	if err != nil || again.State != providers.StateRunning || again.Address != inst.Address {
		t.Errorf("Create of a stopped instance = %+v, %v; want it started at %s", again, err, inst.Address)
	}
	if f.SetState("missing", providers.StateStopped) {
		t.Error("SetState reported a missing instance as found")
	}
}

func TestFakeKeepsRequest(t *testing.T) {
	f := NewFake("fake", fakeHosts...)
	req := fakeRequest(providers.InstanceName("i", "u"), "u")
	req.UserData = providers.UserData("#cloud-config\n")
	req.Auth = &providers.Auth{Username: "u", Password: "pw"}
	if _, err := f.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	req.UserData[0] = 'X' // the caller's buffer is not the backend's
	got, ok := f.Request(req.Name)
	if !ok || string(got.UserData) != "#cloud-config\n" || got.Auth.Password.Reveal() != "pw" {
		t.Errorf("Request = %q %+v %v", got.UserData, got.Auth, ok)
	}
}

func TestFakeRejectsBeforeTouchingBackend(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*providers.CreateRequest)
	}{
		{"unknown host", func(r *providers.CreateRequest) { r.Host = "h9" }},
		{"empty host", func(r *providers.CreateRequest) { r.Host = "" }},
		{"missing uid", func(r *providers.CreateRequest) { r.UID = "" }},
		{"missing installation", func(r *providers.CreateRequest) { r.Installation = "" }},
		{"upper-case name", func(r *providers.CreateRequest) { r.Name = "Egress" }},
		{"name too long", func(r *providers.CreateRequest) { r.Name = strings.Repeat("a", 64) }},
		{"port zero", func(r *providers.CreateRequest) { r.Port = 0 }},
		{"name taken by another proxy", func(r *providers.CreateRequest) { r.UID = "other" }},
		{"name taken by a foreign VM", func(r *providers.CreateRequest) { r.Name = "foreign" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := NewFake("fake", fakeHosts...)
			f.Backend().PutUnmarked("h1", "foreign")
			taken := fakeRequest("egress-taken", "u")
			if _, err := f.Create(t.Context(), taken); err != nil {
				t.Fatal(err)
			}
			req := taken
			c.mutate(&req)
			if _, err := f.Create(t.Context(), req); !errors.Is(err, providers.ErrPermanent) {
				t.Errorf("got %v, want ErrPermanent", err)
			}
			if list, _ := f.List(t.Context()); len(list) != 1 {
				t.Errorf("the backend changed: %+v", list)
			}
		})
	}
}

func TestFakeGauges(t *testing.T) {
	f := NewFake("fake", fakeHosts...)
	const n = 5
	var (
		mu     sync.Mutex
		names  []string
		inside sync.WaitGroup
	)
	release := make(chan struct{})
	inside.Add(n)
	f.OnCall = func(op, name string) {
		mu.Lock()
		names = append(names, op+":"+name)
		mu.Unlock()
		if op == "get" {
			inside.Done()
			<-release
		}
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { _, _ = f.Get(t.Context(), "fake/h2/egress-x") })
	}
	inside.Wait()
	if got := f.InFlight("get"); got != n {
		t.Errorf("InFlight(get) = %d with %d calls blocked, want %d", got, n, n)
	}
	close(release)
	wg.Wait()
	_, _ = f.List(t.Context())

	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"Calls(get)", f.Calls("get"), n},
		{"MaxConcurrent(get)", f.MaxConcurrent("get"), n},
		{"InFlight(get)", f.InFlight("get"), 0},
		{"Calls(list)", f.Calls("list"), 1},
		{"MaxConcurrent(list)", f.MaxConcurrent("list"), 1},
		{"Calls(create)", f.Calls("create"), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if names[0] != "get:egress-x" || names[len(names)-1] != "list:" {
		t.Errorf("OnCall saw %v", names)
	}
}
