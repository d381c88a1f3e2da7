package providertest

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/egressd/egressd/providers"
)

// fakeAddresses is how many addresses 127.100.0.0/16 gives out (host bytes 1..254 per /24);
// past it Create reports ErrQuota, like a real pool running dry.
const fakeAddresses = 256 * 254

// FakeBackend is the state behind one or more Fakes: the "cloud" they all talk to. Sharing
// it between Fakes is how a test restarts a provider without losing its instances.
type FakeBackend struct {
	mu        sync.Mutex
	instances map[string]*fakeInstance // by name: names are unique per backend
	allocated int                      // addresses handed out, never reused
}

type fakeInstance struct {
	host, name string
	state      providers.State
	addr       string
	port       int
	marks      providers.Marks
	req        providers.CreateRequest
}

// NewFakeBackend returns an empty backend.
func NewFakeBackend() *FakeBackend {
	return &FakeBackend{instances: map[string]*fakeInstance{}}
}

// PutUnmarked puts an instance that carries no marks on host, as someone else's VM would be.
func (b *FakeBackend) PutUnmarked(host, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.instances[name] = &fakeInstance{host: host, name: name, state: providers.StateRunning}
}

func (b *FakeBackend) create(provider string, req providers.CreateRequest) (providers.Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if in, ok := b.instances[req.Name]; ok {
		if !in.marks.Managed || in.marks.UID != req.UID || in.marks.Installation != req.Installation {
			return providers.Instance{}, providers.Errorf(providers.ErrPermanent, "create", provider, req.Name,
				"the name is taken by an instance that is not this proxy's")
		}
		// Create promises a started instance, so an existing one is started, not just found.
		in.state = providers.StateRunning
		return in.view(), nil
	}
	if b.allocated == fakeAddresses {
		return providers.Instance{}, providers.Errorf(providers.ErrQuota, "create", provider, req.Name,
			"all %d fake addresses are taken", fakeAddresses)
	}
	n := b.allocated
	b.allocated++
	now := time.Now().UTC()
	in := &fakeInstance{
		host:  req.Host,
		name:  req.Name,
		state: providers.StateRunning,
		addr:  fmt.Sprintf("127.100.%d.%d", n/254, n%254+1),
		port:  req.Port,
		marks: providers.Marks{Managed: true, UID: req.UID, Installation: req.Installation, CreatedAt: now,
			ExpiresAt: providers.ExpiryOf(now, req.Lifetime)},
		req: cloneRequest(req),
	}
	b.instances[req.Name] = in
	return in.view(), nil
}

func (b *FakeBackend) get(provider, host, name string) (providers.Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	in, ok := b.instances[name]
	if !ok || in.host != host {
		return providers.Instance{}, providers.Errorf(providers.ErrNotFound, "get", provider, fakeID(host, name), "no such instance")
	}
	return in.view(), nil
}

func (b *FakeBackend) delete(host, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if in, ok := b.instances[name]; ok && in.host == host {
		delete(b.instances, name)
	}
}

func (b *FakeBackend) list() []providers.Instance {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []providers.Instance
	for _, name := range slices.Sorted(maps.Keys(b.instances)) {
		if in := b.instances[name]; in.marks.Managed {
			out = append(out, in.view())
		}
	}
	return out
}

func (b *FakeBackend) setState(name string, st providers.State) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	in, ok := b.instances[name]
	if ok {
		in.state = st
	}
	return ok
}

func (b *FakeBackend) request(name string) (providers.CreateRequest, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	in, ok := b.instances[name]
	if !ok || !in.marks.Managed {
		return providers.CreateRequest{}, false
	}
	return cloneRequest(in.req), true
}

func (in *fakeInstance) view() providers.Instance {
	inst := providers.Instance{
		ID:    fakeID(in.host, in.name),
		Name:  in.name,
		Host:  in.host,
		State: in.state,
		Port:  in.port,
		Marks: in.marks,
	}
	// The contract ties the address to Running; a stopped VM has none worth dialling.
	if in.state == providers.StateRunning {
		inst.Address = in.addr
	}
	return inst
}

// cloneRequest copies what the caller could mutate after Create returned.
func cloneRequest(req providers.CreateRequest) providers.CreateRequest {
	req.UserData = slices.Clone(req.UserData)
	if req.Auth != nil {
		auth := *req.Auth
		req.Auth = &auth
	}
	return req
}
