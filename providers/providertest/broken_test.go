package providertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
)

// The suite is only worth something if it fails bad providers. Each variant below breaks
// one rule of the contract on top of a Fake; TestSuiteCatchesBrokenProviders runs the
// suite on it in a child process (a failing subtest cannot be observed in-process) and
// expects the subtest named for that rule to fail.

const brokenEnv = "PROVIDERTEST_BROKEN"

var brokenVariants = map[string]struct {
	caughtBy string // the subtest that must fail
	wrap     func(*Fake) providers.Provider
}{
	"create-not-idempotent": {"CreateIsIdempotent", mutate(func(b *broken) {
		var n atomic.Int64
		b.create = func(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
			req.Name = fmt.Sprintf("%s-%d", req.Name, n.Add(1))
			return b.f.Create(ctx, req)
		}
	})},
	"createdat-rewritten": {"CreateIsIdempotent", mutate(func(b *broken) {
		b.get = edit(b.f.Get, func(i *providers.Instance) { i.Marks.CreatedAt = time.Now() })
	})},
	"stopped-after-create": {"RunningHasAddress", mutate(func(b *broken) {
		b.get = edit(b.f.Get, func(i *providers.Instance) { i.State = providers.StateStopped })
	})},
	"running-without-address": {"RunningHasAddress", mutate(func(b *broken) {
		b.get = edit(b.f.Get, func(i *providers.Instance) { i.Address = "" })
	})},
	"wrong-port": {"RunningHasAddress", mutate(func(b *broken) {
		b.get = edit(b.f.Get, func(i *providers.Instance) { i.Port++ })
	})},
	"marks-remembered": {"MarksReadBack", mutate(func(b *broken) {
		var memory sync.Map // what this provider object saw Create write
		b.create = func(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
			inst, err := b.f.Create(ctx, req)
			memory.Store(inst.ID, inst.Marks)
			return inst, err
		}
		recall := func(i *providers.Instance) {
			m, _ := memory.Load(i.ID)
			i.Marks, _ = m.(providers.Marks)
		}
		b.get = edit(b.f.Get, recall)
		b.list = editList(b.f.List, recall)
	})},
	"createdat-zero": {"MarksReadBack", mutate(func(b *broken) {
		b.get = edit(b.f.Get, func(i *providers.Instance) { i.Marks.CreatedAt = time.Time{} })
	})},
	"get-after-delete-transient": {"DeleteIsIdempotent", mutate(func(b *broken) {
		b.get = reclass(b.f.Get, providers.ErrNotFound, providers.ErrTransient)
	})},
	"delete-missing-notfound": {"DeleteIsIdempotent", mutate(func(b *broken) {
		b.delete = func(ctx context.Context, id string) error {
			if _, err := b.f.Get(ctx, id); errors.Is(err, providers.ErrNotFound) {
				return err
			}
			return b.f.Delete(ctx, id)
		}
	})},
	"malformed-notfound": {"MalformedIDIsPermanent", mutate(func(b *broken) {
		b.get = reclass(b.f.Get, providers.ErrPermanent, providers.ErrNotFound)
	})},
	"malformed-delete-succeeds": {"MalformedIDIsPermanent", mutate(func(b *broken) {
		b.delete = func(ctx context.Context, id string) error {
			if err := b.f.Delete(ctx, id); !errors.Is(err, providers.ErrPermanent) {
				return err
			}
			return nil
		}
	})},
	"list-unmarked": {"ListOnlyMarked", mutate(func(b *broken) {
		b.list = func(ctx context.Context) ([]providers.Instance, error) {
			list, err := b.f.List(ctx)
			return append(list, providers.Instance{ID: "fake/h1/someone-elses-vm", Name: "someone-elses-vm",
				State: providers.StateRunning, Address: "127.0.0.9", Port: 3128}), err
		}
	})},
	"list-stale": {"ListOnlyMarked", mutate(func(b *broken) {
		var mu sync.Mutex
		cache := map[string]providers.Instance{}
		b.list = func(ctx context.Context) ([]providers.Instance, error) {
			list, err := b.f.List(ctx)
			mu.Lock()
			defer mu.Unlock()
			for _, inst := range list {
				cache[inst.ID] = inst
			}
			list = list[:0]
			for _, inst := range cache {
				list = append(list, inst)
			}
			return list, err
		}
	})},
	"ignores-cancel": {"CancelledContextReturns", mutate(func(b *broken) {
		b.get = func(_ context.Context, id string) (providers.Instance, error) {
			return b.f.Get(context.Background(), id)
		}
	})},
	"permanent-under-contention": {"ConcurrentCreateDeleteSameName", mutate(func(b *broken) {
		var deleting atomic.Int64
		b.delete = func(ctx context.Context, id string) error {
			deleting.Add(1)
			defer deleting.Add(-1)
			time.Sleep(50 * time.Millisecond) // hold the window open so the Creates meet it
			return b.f.Delete(ctx, id)
		}
		b.create = func(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
			// Wait for a Delete released with this Create, so the race is certain to happen.
			for deadline := time.Now().Add(time.Second); deleting.Load() == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			if deleting.Load() > 0 {
				return providers.Instance{}, providers.Errorf(providers.ErrPermanent, "create", "fake", req.Name, "busy")
			}
			return b.f.Create(ctx, req)
		}
	})},
	"same-address": {"ConcurrentCreatesDoNotCollide", mutate(func(b *broken) {
		b.get = edit(b.f.Get, func(i *providers.Instance) { i.Address = "127.0.0.1" })
	})},
	"leaks-user-data": {"ErrorsAreClassifiedAndRedacted", mutate(func(b *broken) {
		b.create = func(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
			inst, err := b.f.Create(ctx, req)
			if err != nil {
				err = fmt.Errorf("%w (user-data %s)", err, string(req.UserData))
			}
			return inst, err
		}
	})},
	"leaks-password": {"ErrorsAreClassifiedAndRedacted", mutate(func(b *broken) {
		b.create = func(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
			inst, err := b.f.Create(ctx, req)
			if err != nil {
				err = fmt.Errorf("%w (auth %s)", err, req.Auth.Password.Reveal())
			}
			return inst, err
		}
	})},
	"unclassified": {"ErrorsAreClassifiedAndRedacted", mutate(func(b *broken) {
		b.list = func(ctx context.Context) ([]providers.Instance, error) {
			list, err := b.f.List(ctx)
			if err != nil {
				err = errors.New(err.Error())
			}
			return list, err
		}
	})},
	"accepts-bad-port": {"ErrorsAreClassifiedAndRedacted", mutate(func(b *broken) {
		b.create = func(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
			req.Port = max(1, min(req.Port, 65535))
			return b.f.Create(ctx, req)
		}
	})},
	"create-notfound": {"ErrorsAreClassifiedAndRedacted", mutate(func(b *broken) {
		b.create = func(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
			inst, err := b.f.Create(ctx, req)
			if err != nil {
				err = &providers.Error{Class: providers.ErrNotFound, Op: "create", Provider: "fake", ID: req.Name, Err: err}
			}
			return inst, err
		}
	})},
	"catalog-without-host": {"Catalog", mutate(func(b *broken) {
		b.catalog = func() providers.Catalog { return providers.Catalog{Type: "fake", Hosts: fakeHosts[1:]} }
	})},
	"no-catalog": {"Catalog", func(f *Fake) providers.Provider { return uncataloged{f} }},
}

func TestSuiteCatchesBrokenProviders(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("inside a child run")
	}
	child := func(t *testing.T, variant, run string) (string, error) {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+run, "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), brokenEnv+"="+variant)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Run("control", func(t *testing.T) {
		t.Parallel()
		if out, err := child(t, "control", "^TestBrokenChild$"); err != nil {
			t.Errorf("the suite failed an unbroken fake in a child run: %v\n%s", err, out)
		}
	})
	for name, v := range brokenVariants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := child(t, name, "^TestBrokenChild$/^"+v.caughtBy+"$")
			if err == nil {
				t.Errorf("%s passed a provider that breaks it:\n%s", v.caughtBy, out)
			} else if !strings.Contains(out, "--- FAIL: TestBrokenChild/"+v.caughtBy) {
				t.Errorf("the child failed without %s failing: %v\n%s", v.caughtBy, err, out)
			}
		})
	}
}

// TestBrokenChild is the child side of TestSuiteCatchesBrokenProviders.
func TestBrokenChild(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("run by TestSuiteCatchesBrokenProviders")
	}
	wrap := mutate(func(*broken) {})
	if name != "control" {
		v, ok := brokenVariants[name]
		if !ok {
			t.Fatalf("unknown variant %q", name)
		}
		wrap = v.wrap
	}
	Run(t, fakeHarness(wrap))
}

// broken is a Fake with some of its methods replaced.
type broken struct {
	f       *Fake
	create  func(context.Context, providers.CreateRequest) (providers.Instance, error)
	get     func(context.Context, string) (providers.Instance, error)
	delete  func(context.Context, string) error
	list    func(context.Context) ([]providers.Instance, error)
	catalog func() providers.Catalog
}

func mutate(breakIt func(*broken)) func(*Fake) providers.Provider {
	return func(f *Fake) providers.Provider {
		b := &broken{f: f, create: f.Create, get: f.Get, delete: f.Delete, list: f.List, catalog: f.Catalog}
		breakIt(b)
		return b
	}
}

func (b *broken) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	return b.create(ctx, req)
}
func (b *broken) Get(ctx context.Context, id string) (providers.Instance, error) {
	return b.get(ctx, id)
}
func (b *broken) Delete(ctx context.Context, id string) error            { return b.delete(ctx, id) }
func (b *broken) List(ctx context.Context) ([]providers.Instance, error) { return b.list(ctx) }
func (b *broken) Catalog() providers.Catalog                             { return b.catalog() }
func (b *broken) fake() *Fake                                            { return b.f }

// uncataloged hides the Fake's Catalog method.
type uncataloged struct{ f *Fake }

func (u uncataloged) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	return u.f.Create(ctx, req)
}
func (u uncataloged) Get(ctx context.Context, id string) (providers.Instance, error) {
	return u.f.Get(ctx, id)
}
func (u uncataloged) Delete(ctx context.Context, id string) error            { return u.f.Delete(ctx, id) }
func (u uncataloged) List(ctx context.Context) ([]providers.Instance, error) { return u.f.List(ctx) }
func (u uncataloged) fake() *Fake                                            { return u.f }

func edit(get func(context.Context, string) (providers.Instance, error), change func(*providers.Instance)) func(context.Context, string) (providers.Instance, error) {
	return func(ctx context.Context, id string) (providers.Instance, error) {
		inst, err := get(ctx, id)
		if err == nil {
			change(&inst)
		}
		return inst, err
	}
}

func editList(list func(context.Context) ([]providers.Instance, error), change func(*providers.Instance)) func(context.Context) ([]providers.Instance, error) {
	return func(ctx context.Context) ([]providers.Instance, error) {
		insts, err := list(ctx)
		for i := range insts {
			change(&insts[i])
		}
		return insts, err
	}
}

// reclass gives get's errors of class from the class to instead.
func reclass(get func(context.Context, string) (providers.Instance, error), from, to error) func(context.Context, string) (providers.Instance, error) {
	return func(ctx context.Context, id string) (providers.Instance, error) {
		inst, err := get(ctx, id)
		if errors.Is(err, from) {
			err = providers.Errorf(to, "get", "fake", id, "reclassified")
		}
		return inst, err
	}
}
