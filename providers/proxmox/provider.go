// Package proxmox runs forward-proxy instances as Proxmox VE VMs, cloned from templates
// through PVE's REST API. It imports no NATS; cmd/egressd wires it in.
package proxmox

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/providers"
)

// Provider runs instances as PVE VMs. It is safe for concurrent use, also by several
// processes sharing a cluster.
type Provider struct {
	name string
	cfg  settings
	log  *slog.Logger
	api  *client
	now  func() time.Time

	names providers.KeyedMutex // Create and Delete of one instance
	clone semaphores           // clones in flight per node and storage
}

var (
	_ providers.Provider  = (*Provider)(nil)
	_ providers.Cataloger = (*Provider)(nil)
	_ providers.Checker   = (*Provider)(nil)
)

// Budgets of the steps (docs/providers/proxmox.md, "What each call does"); one request is Config.RequestTimeoutSeconds.
const (
	cloneBudget   = 10 * time.Minute
	uploadBudget  = 2 * time.Minute
	powerBudget   = 2 * time.Minute
	destroyBudget = 5 * time.Minute
	runningBudget = 60 * time.Second
	resizeBudget  = 2 * time.Minute
	lockBudget    = 30 * time.Second // waiting for another Create or Delete of one name here
)

// New builds a provider named name (a DNS label: it is written into each VM's marks). It
// validates cfg and reads caFile; it does no network I/O.
func New(name string, cfg Config, log *slog.Logger) (*Provider, error) {
	if !providers.ValidName(name) {
		return nil, fmt.Errorf("proxmox provider %q: the name must be a DNS-1123 label", name)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxmox provider %s: %w", name, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("provider", name, "logger", "proxmox")
	s := cfg.settings()
	api, err := newClient(s, log)
	if err != nil {
		return nil, fmt.Errorf("proxmox provider %s: %w", name, err)
	}
	if cfg.InsecureSkipTLSVerify {
		log.Warn("insecureSkipTLSVerify is set: the PVE API's certificate is not verified, so anyone on the path can read the API token")
	}
	return &Provider{name: name, cfg: s, log: log, api: api, now: time.Now}, nil
}

// Close drops idle connections.
func (p *Provider) Close() error {
	p.api.close()
	return nil
}

// Catalog offers the nodes, machine types and template keys; never the URL or the token.
func (p *Provider) Catalog() providers.Catalog {
	c := providers.Catalog{
		Type:         "proxmox",
		MachineTypes: map[string]providers.MachineType{},
		Images:       slices.Sorted(maps.Keys(p.cfg.Templates)),
	}
	for _, n := range p.cfg.Nodes {
		c.Hosts = append(c.Hosts, providers.Host{Name: n.Name, MaxConcurrentOps: n.MaxConcurrentOps})
	}
	for k, mt := range p.cfg.MachineTypes {
		c.MachineTypes[k] = providers.MachineType{VCPUs: mt.Cores, MemoryMiB: mt.MemoryMiB}
	}
	return c
}

// Instance IDs are vms/<vmid>/<name>: the VMID is unique in a cluster and the node is looked
// up (a VM may migrate); the name makes a VMID reused by someone else read as gone.
const idVMs = "vms"

func idOf(vmid int, name string) string { return idVMs + "/" + strconv.Itoa(vmid) + "/" + name }

func parseID(id string) (int, string, error) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] != idVMs || !providers.ValidName(parts[2]) {
		return 0, "", fmt.Errorf("%w %q: want vms/<vmid>/<name>", errBadID, id)
	}
	vmid, err := strconv.Atoi(parts[1])
	if err != nil || vmid < minVMID || vmid > maxVMID || strconv.Itoa(vmid) != parts[1] {
		return 0, "", fmt.Errorf("%w %q: the VMID is not a number between %d and %d", errBadID, id, minVMID, maxVMID)
	}
	return vmid, parts[2], nil
}

// lockName serializes Create and Delete of one instance within this process. Across
// processes the provisioner's per-proxy op lock does.
func (p *Provider) lockName(ctx context.Context, name string) (func(), error) {
	ctx, cancel := context.WithTimeout(ctx, lockBudget)
	defer cancel()
	unlock, err := p.names.Lock(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is busy with another create or delete: %w", errBusy, name, err)
	}
	return unlock, nil
}

// semaphores bound clones per node and storage: PVE takes lock files per VM and storage, and
// parallel clones into one storage time out on them (bpg/terraform-provider-proxmox #995,
// #1521). The work queues already bound ops per node (maxConcurrentOps); this bounds clones
// the same way for every caller of the provider, the orphan collector and tests included.
type semaphores struct {
	mu   sync.Mutex
	sems map[string]chan struct{}
}

// acquire takes one of capacity slots of key, or returns ctx's error.
func (s *semaphores) acquire(ctx context.Context, key string, capacity int) (release func(), err error) {
	s.mu.Lock()
	if s.sems == nil {
		s.sems = map[string]chan struct{}{}
	}
	sem := s.sems[key]
	if sem == nil {
		// Keys are node/storage pairs of the config: few, so they are kept.
		sem = make(chan struct{}, max(1, capacity))
		s.sems[key] = sem
	}
	s.mu.Unlock()
	select {
	case sem <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-sem }) }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
