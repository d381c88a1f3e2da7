package provisioner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/schemas"
	"github.com/egressd/egressd/workers"
)

// run carries out one op and describes the outcome; it never returns user-data or
// credentials in the result.
func (p *Provisioner) run(ctx context.Context, op events.Op) events.OpResult {
	var (
		inst *providers.Instance
		hash string
		err  error
	)
	switch op.Kind {
	case events.OpCreate:
		inst, hash, err = p.create(ctx, op)
	case events.OpGet:
		inst, err = p.get(ctx, op)
	case events.OpDelete:
		inst, err = p.delete(ctx, op)
	default:
		err = providers.Errorf(providers.ErrPermanent, string(op.Kind), p.cfg.Provider, op.InstanceName, "unknown op kind %q", op.Kind)
	}
	res := events.OpResult{SpecHash: hash}
	if inst != nil {
		res.Instance = &events.Instance{ID: inst.ID, Name: inst.Name, State: string(inst.State), Address: inst.Address,
			Port: inst.Port, EgressIP: inst.EgressIP, UID: inst.Marks.UID, CreatedAt: inst.Marks.CreatedAt, ExpiresAt: inst.Marks.ExpiresAt}
	}
	if err != nil {
		var stale *staleError
		if errors.As(err, &stale) {
			res.ErrorClass = events.ClassStale
		} else {
			res.ErrorClass = workers.ClassOf(err)
		}
		res.Error = err.Error()
	}
	return res
}

type staleError struct{ why string }

func (e *staleError) Error() string { return "stale op: " + e.why }

func (p *Provisioner) create(ctx context.Context, op events.Op) (*providers.Instance, string, error) {
	req, hash, err := p.request(ctx, op)
	if err != nil {
		return nil, "", err
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CreateBudget)
	defer cancel()
	inst, err := p.cfg.Backend.Create(cctx, req)
	if err != nil {
		return nil, hash, err
	}
	if err := p.guard(op, inst); err != nil {
		return nil, hash, err
	}
	return &inst, hash, nil
}

// request rebuilds the CreateRequest from the spec as it is now. Ops carry no user-data;
// a spec that no longer hashes to the op's hash means a newer decision is on its way.
func (p *Provisioner) request(ctx context.Context, op events.Op) (providers.CreateRequest, string, error) {
	raw, _, err := kvstore.Get(ctx, p.cfg.Buckets.Proxies, op.Proxy)
	if errors.Is(err, kvstore.ErrNotFound) {
		return providers.CreateRequest{}, "", &staleError{why: "the proxy was deleted"}
	}
	if err != nil {
		return providers.CreateRequest{}, "", providers.Wrap(providers.ErrTransient, "create", p.cfg.Provider, op.InstanceName, fmt.Errorf("read spec: %w", err))
	}
	spec, err := schemas.ParseProxySpec(raw)
	if err != nil {
		return providers.CreateRequest{}, "", &staleError{why: "the spec is no longer valid"}
	}
	userData := []byte(spec.CloudInit)
	if spec.CloudInitRef != "" {
		userData, _, err = kvstore.Get(ctx, p.cfg.Buckets.CloudInit, spec.CloudInitRef)
		if err != nil {
			return providers.CreateRequest{}, "", &staleError{why: "the cloud_init document is not readable"}
		}
	}
	hash := spec.Hash(userData)
	if hash != op.SpecHash {
		return providers.CreateRequest{}, hash, &staleError{why: "the spec changed since the op was issued"}
	}
	req := providers.CreateRequest{
		Name: op.InstanceName, UID: op.UID, Installation: p.cfg.Installation, Proxy: op.Proxy, Host: op.Host,
		Placement: providers.Placement(spec.Placement), Port: spec.Port, UserData: userData, Attempt: op.ID,
		Lifetime: p.lifetime(spec),
	}
	if req.Auth, err = p.credentials(op, spec.Auth); err != nil {
		return providers.CreateRequest{}, hash, err
	}
	if req.Avoid, err = p.avoid(ctx, op); err != nil {
		return providers.CreateRequest{}, hash, err
	}
	return req, hash, nil
}

// lifetime is how long an instance of spec may live: the spec's maxLifetimeSeconds, else the
// provider's (its config entry's, in the catalog's limits), else none.
func (p *Provisioner) lifetime(spec schemas.ProxySpec) time.Duration {
	secs := spec.MaxLifetimeSeconds
	if secs <= 0 {
		secs = p.cfg.Catalog.Limits[events.LimitMaxLifetimeSeconds]
	}
	return time.Duration(max(secs, 0)) * time.Second
}

func (p *Provisioner) get(ctx context.Context, op events.Op) (*providers.Instance, error) {
	id, err := p.resolveID(ctx, op)
	if err != nil {
		return nil, err
	}
	gctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
	defer cancel()
	inst, err := p.cfg.Backend.Get(gctx, id)
	if err != nil {
		return nil, err
	}
	if err := p.guard(op, inst); err != nil {
		return nil, err
	}
	return &inst, nil
}

// delete deletes and reads back: NotFound means gone; an instance means it is going away.
func (p *Provisioner) delete(ctx context.Context, op events.Op) (*providers.Instance, error) {
	id, err := p.resolveID(ctx, op)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
	defer cancel()
	if err := p.cfg.Backend.Delete(dctx, id); err != nil {
		return nil, err
	}
	inst, err := p.cfg.Backend.Get(dctx, id)
	if err != nil {
		return nil, err
	}
	return &inst, nil
}

// resolveID finds the instance of an op that carries no ID (its create's result was lost)
// among the provider's marked instances, by name and UID.
func (p *Provisioner) resolveID(ctx context.Context, op events.Op) (string, error) {
	if op.InstanceID != "" {
		return op.InstanceID, nil
	}
	lctx, cancel := context.WithTimeout(ctx, p.cfg.Timings.CallBudget)
	defer cancel()
	list, err := p.cfg.Backend.List(lctx)
	if err != nil {
		return "", err
	}
	for _, inst := range list {
		if inst.Name == op.InstanceName && inst.Marks.UID == op.UID && inst.Marks.Installation == p.cfg.Installation {
			return inst.ID, nil
		}
	}
	return "", providers.Errorf(providers.ErrNotFound, string(op.Kind), p.cfg.Provider, op.InstanceName, "no instance with this name and uid")
}

// guard refuses to adopt an instance that carries another proxy's or installation's marks.
func (p *Provisioner) guard(op events.Op, inst providers.Instance) error {
	if inst.Marks.UID != "" && inst.Marks.UID != op.UID || inst.Marks.Installation != "" && inst.Marks.Installation != p.cfg.Installation {
		return providers.Errorf(providers.ErrPermanent, string(op.Kind), p.cfg.Provider, inst.ID,
			"instance %s carries the marks of another proxy or installation", inst.Name)
	}
	return nil
}
