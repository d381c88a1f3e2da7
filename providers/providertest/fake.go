package providertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/providers"
)

// fakeType is the catalog type and the first segment of every fake ID.
const fakeType = "fake"

// fakeOps are the operations Fail, Delay and the counters accept.
var fakeOps = []string{"create", "get", "delete", "list"}

// Fake is a deterministic in-memory provider for the workers' tests. Instances are Running as
// soon as Create returns, at 127.100.x.y addresses handed out in order, with IDs
// "fake/<host>/<name>". Tests inject failures and delays per operation and read call
// counters and concurrency gauges. All methods are safe for concurrent use.
type Fake struct {
	// OnCall, if set before the first call, runs at the start of every call with the op and
	// the instance name ("" for list). It runs while the call counts as in flight, so a hook
	// that blocks holds the call there.
	OnCall func(op, name string)

	name    string
	hosts   []providers.Host
	backend *FakeBackend

	mu       sync.Mutex
	failures map[string]*failure
	delays   map[string]time.Duration
	calls    map[string]int
	inFlight map[string]int
	maxConc  map[string]int
}

type failure struct {
	err   error
	times int // < 0: until cleared
}

var (
	_ providers.Provider  = (*Fake)(nil)
	_ providers.Cataloger = (*Fake)(nil)
)

// NewFake returns a Fake with its own backend, named name (as configured providers are) and
// offering hosts; with no hosts it offers one, "fake-host".
func NewFake(name string, hosts ...providers.Host) *Fake {
	return NewFakeOn(NewFakeBackend(), name, hosts...)
}

// NewFakeOn returns a Fake over an existing backend: a restarted provider, or a second
// provisioner for the same backend.
func NewFakeOn(b *FakeBackend, name string, hosts ...providers.Host) *Fake {
	if len(hosts) == 0 {
		hosts = []providers.Host{{Name: "fake-host", MaxConcurrentOps: 4}}
	}
	return &Fake{
		name:     name,
		hosts:    slices.Clone(hosts),
		backend:  b,
		failures: map[string]*failure{},
		delays:   map[string]time.Duration{},
		calls:    map[string]int{},
		inFlight: map[string]int{},
		maxConc:  map[string]int{},
	}
}

// Backend returns the state behind f, for NewFakeOn and PutUnmarked.
func (f *Fake) Backend() *FakeBackend { return f.backend }

// Fail makes the next times calls of op return err, classified: a class sentinel or an
// error already built with providers.Wrap keeps its class, anything else is Transient (as
// ClassOf treats it). times < 0 fails until the next Fail for op; times == 0 clears.
func (f *Fake) Fail(op string, err error, times int) {
	mustOp(op)
	f.mu.Lock()
	defer f.mu.Unlock()
	if times == 0 || err == nil {
		delete(f.failures, op)
		return
	}
	f.failures[op] = &failure{err: err, times: times}
}

// Delay makes every call of op block for d first, or until its context ends. Zero clears.
func (f *Fake) Delay(op string, d time.Duration) {
	mustOp(op)
	f.mu.Lock()
	defer f.mu.Unlock()
	if d <= 0 {
		delete(f.delays, op)
		return
	}
	f.delays[op] = d
}

// SetState puts the named instance into st, as a VM stopping behind the provider's back
// would. It reports whether the instance exists.
func (f *Fake) SetState(name string, st providers.State) bool {
	return f.backend.setState(name, st)
}

// Request returns the request that created the named instance, user-data and auth
// included, so tests can check what the provider was given.
func (f *Fake) Request(name string) (providers.CreateRequest, bool) {
	return f.backend.request(name)
}

// Calls returns how many calls of op f has started.
func (f *Fake) Calls(op string) int { return f.gauge(op, f.calls) }

// InFlight returns how many calls of op are running now.
func (f *Fake) InFlight(op string) int { return f.gauge(op, f.inFlight) }

// MaxConcurrent returns the most calls of op ever in flight at once.
func (f *Fake) MaxConcurrent(op string) int { return f.gauge(op, f.maxConc) }

func (f *Fake) gauge(op string, m map[string]int) int {
	mustOp(op)
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[op]
}

// Catalog offers the hosts f was built with.
func (f *Fake) Catalog() providers.Catalog {
	return providers.Catalog{Type: fakeType, Hosts: slices.Clone(f.hosts)}
}

// Create makes the instance Running at once, or returns the existing one, started.
func (f *Fake) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	done, err := f.begin(ctx, "create", req.Name, req.Name)
	defer done()
	if err != nil {
		return providers.Instance{}, err
	}
	if err := f.validate(req); err != nil {
		return providers.Instance{}, err
	}
	return f.backend.create(f.name, req)
}

// Get reads the instance back from the backend.
func (f *Fake) Get(ctx context.Context, id string) (providers.Instance, error) {
	host, name, perr := f.parseID("get", id)
	done, err := f.begin(ctx, "get", name, id)
	defer done()
	if err != nil {
		return providers.Instance{}, err
	}
	if perr != nil {
		return providers.Instance{}, perr
	}
	return f.backend.get(f.name, host, name)
}

// Delete removes the instance; a missing one is already deleted.
func (f *Fake) Delete(ctx context.Context, id string) error {
	host, name, perr := f.parseID("delete", id)
	done, err := f.begin(ctx, "delete", name, id)
	defer done()
	if err != nil {
		return err
	}
	if perr != nil {
		return perr
	}
	f.backend.delete(host, name)
	return nil
}

// List returns every marked instance in the backend, sorted by name.
func (f *Fake) List(ctx context.Context) ([]providers.Instance, error) {
	done, err := f.begin(ctx, "list", "", "")
	defer done()
	if err != nil {
		return nil, err
	}
	return f.backend.list(), nil
}

// begin counts the call, runs the hook and the delay, then hands out an injected failure;
// done must be called when the call ends, even on error.
func (f *Fake) begin(ctx context.Context, op, name, id string) (done func(), err error) {
	f.mu.Lock()
	f.calls[op]++
	f.inFlight[op]++
	f.maxConc[op] = max(f.maxConc[op], f.inFlight[op])
	delay := f.delays[op]
	f.mu.Unlock()
	done = func() {
		f.mu.Lock()
		f.inFlight[op]--
		f.mu.Unlock()
	}

	if f.OnCall != nil {
		f.OnCall(op, name)
	}
	if delay > 0 {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
	if err := ctx.Err(); err != nil {
		return done, providers.Wrap(providers.ErrTransient, op, f.name, id, err)
	}
	return done, f.takeFailure(op, id)
}

func (f *Fake) takeFailure(op, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.failures[op]
	if fl == nil {
		return nil
	}
	if fl.times > 0 {
		if fl.times--; fl.times == 0 {
			delete(f.failures, op)
		}
	}
	var classified *providers.Error
	if errors.As(fl.err, &classified) {
		return fl.err
	}
	class := providers.ClassOf(fl.err)
	if fl.err == class {
		return providers.Errorf(class, op, f.name, id, "injected failure")
	}
	return providers.Wrap(class, op, f.name, id, fl.err)
}

// validate rejects what no backend could serve before touching it, naming field and value.
func (f *Fake) validate(req providers.CreateRequest) error {
	bad := func(format string, args ...any) error {
		return providers.Errorf(providers.ErrPermanent, "create", f.name, req.Name, format, args...)
	}
	switch {
	case !providers.ValidName(req.Name):
		return bad("invalid name %q: want a DNS label", req.Name)
	case req.UID == "" || req.Installation == "":
		return bad("uid and installation are required for the marks")
	case req.Port < 1 || req.Port > 65535:
		return bad("invalid port %d", req.Port)
	case !f.hasHost(req.Host):
		return bad("unknown host %q", req.Host)
	}
	return nil
}

// parseID splits "fake/<host>/<name>"; anything else can never resolve, so it is Permanent.
func (f *Fake) parseID(op, id string) (host, name string, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] != fakeType || !f.hasHost(parts[1]) || !providers.ValidName(parts[2]) {
		return "", "", providers.Errorf(providers.ErrPermanent, op, f.name, id, "malformed ID: want %s/<host>/<name>", fakeType)
	}
	return parts[1], parts[2], nil
}

func (f *Fake) hasHost(name string) bool {
	return slices.ContainsFunc(f.hosts, func(h providers.Host) bool { return h.Name == name })
}

func fakeID(host, name string) string { return fakeType + "/" + host + "/" + name }

func mustOp(op string) {
	if !slices.Contains(fakeOps, op) {
		panic(fmt.Sprintf("providertest: unknown op %q, want one of %v", op, fakeOps))
	}
}
