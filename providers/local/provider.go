// Package local is the provider whose instances are forward-proxy processes on this machine
// (`egressd forward-proxy`, see package forwardproxy), each listening on an address of its
// own from a configured pool: loopback addresses by default, like a VM's own IP, or a host's
// public addresses, which then also serve as each proxy's egress IP.
//
// Instances outlive the provisioner that made them. Each proxy runs in a session of its own,
// started through a short-lived intermediate process (a double fork), and everything about it
// lives in a directory under Config.StateDir, so a new provider object, in this process or
// another, finds the same instances: Get tells a live proxy from a dead one and List finds
// them all.
//
// Placement is ignored: there is one host ("local"), no machine types and no images. User-data
// is ignored too, since there is no machine to initialise; both still count in the spec hash
// upstream, so changing them replaces the instance as for any provider.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/egressd/egressd/providers"
)

const hostName = "local"

// Provider runs instances as local forward-proxy processes. It is safe for concurrent use,
// also by several processes sharing one StateDir.
type Provider struct {
	name     string
	cfg      Config
	stateDir string
	pool     []netip.Addr
	log      *slog.Logger
	names    providers.KeyedMutex

	// Budgets of the calls this provider makes. Fields, so that tests can shorten them.
	lockTimeout  time.Duration // waiting for another Create or Delete of the same name
	startTimeout time.Duration // the intermediate, from exec to exit
	readyTimeout time.Duration // the proxy, from exec to listening; less than startTimeout
	stopGrace    time.Duration // SIGTERM to SIGKILL
}

var (
	_ providers.Provider  = (*Provider)(nil)
	_ providers.Cataloger = (*Provider)(nil)
	_ providers.Checker   = (*Provider)(nil)
)

// New builds a provider named name. It validates cfg and touches nothing: the state dir is
// created by the first call that needs it.
func New(name string, cfg Config, log *slog.Logger) (*Provider, error) {
	if name == "" {
		return nil, errors.New("local provider: name is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("local provider %s: %w", name, err)
	}
	pool, _ := cfg.pool()
	dir, err := cfg.stateDir()
	if err != nil {
		return nil, fmt.Errorf("local provider %s: stateDir: %w", name, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{
		name:         name,
		cfg:          cfg,
		stateDir:     dir,
		pool:         pool,
		log:          log.With("provider", name),
		lockTimeout:  30 * time.Second,
		startTimeout: 15 * time.Second,
		readyTimeout: 10 * time.Second,
		stopGrace:    5 * time.Second,
	}, nil
}

// Catalog offers the one host, and the pool size as the instance limit.
func (p *Provider) Catalog() providers.Catalog {
	return providers.Catalog{
		Type:   "local",
		Hosts:  []providers.Host{{Name: hostName, MaxConcurrentOps: p.cfg.maxOps()}},
		Limits: map[string]int{"addresses": len(p.pool)},
		// Create rewrites a running proxy's auth file, which it re-reads: no new instance.
		CredentialsInPlace: true,
	}
}

// Get reads the instance back from its directory: no directory is NotFound; no pid file yet
// is Provisioning; a live proxy is Running; a dead one is Stopped.
func (p *Provider) Get(ctx context.Context, id string) (providers.Instance, error) {
	inst, err := p.get(ctx, id)
	return inst, p.classify("get", id, err)
}

func (p *Provider) get(ctx context.Context, id string) (providers.Instance, error) {
	name, err := parseID(id)
	if err != nil {
		return providers.Instance{}, err
	}
	if err := ctx.Err(); err != nil {
		return providers.Instance{}, err
	}
	m, err := p.readMeta(name)
	if err != nil {
		return providers.Instance{}, err
	}
	return p.describe(m), nil
}

// describe reports an instance from its meta and its process. An instance without a pid file
// has never listened: its Create is under way, or died, and the next Create will start it;
// either way it is not Stopped.
func (p *Provider) describe(m *meta) providers.Instance {
	inst := providers.Instance{
		ID:   idOf(m.Name),
		Name: m.Name,
		Host: hostName,
		Port: m.Port,
		Marks: providers.Marks{
			Managed:      m.Managed,
			UID:          m.UID,
			Installation: m.Installation,
			CreatedAt:    m.CreatedAt,
			ExpiresAt:    m.ExpiresAt,
		},
	}
	marker := p.pidPath(m.Name)
	pid, err := readPID(marker)
	switch {
	case err == nil && pid == 0:
		inst.State = providers.StateProvisioning
	case err == nil && alive(pid, marker):
		inst.State = providers.StateRunning
		inst.Address = m.Address
		if m.BindSource {
			inst.EgressIP = m.Address // it dials out from its own address
		}
	default:
		inst.State = providers.StateStopped
	}
	return inst
}

// List returns every instance whose instance.json carries the managed mark, with the marks read
// from disk. Directories whose instance.json is missing or unreadable are left out: nothing
// vouches for their marks, and they are orphans for garbage collection to find by other means.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	list, err := p.list(ctx)
	return list, p.classify("list", "", err)
}

func (p *Provider) list(ctx context.Context) ([]providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names, err := p.instanceNames()
	if err != nil {
		return nil, err
	}
	list := []providers.Instance{}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := p.readMeta(name)
		switch {
		case errors.Is(err, errNoInstance):
			continue // deleted meanwhile
		case err != nil:
			p.log.Debug("list: skipping an unreadable instance", "instance", name, "err", err)
			continue
		case !m.Managed:
			continue
		}
		list = append(list, p.describe(m))
	}
	return list, nil
}
