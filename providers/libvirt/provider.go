package libvirt

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/egressd/egressd/providers"
)

// Hooks are what the provider needs from its caller because it never imports NATS.
type Hooks struct {
	// Lock takes a lock shared by every process running this provider (the provisioner wires
	// it to a lock in NATS KV), so that a base image is fetched once per host however many
	// provisioners run. It blocks until the lock is held or ctx ends; the lock must stay held
	// (renewed) until release is called. Keys look like "image.<provider>.<host>.<image key>".
	// Nil: the lock is only within this process.
	Lock func(ctx context.Context, key string) (release func(), err error)
	// Progress reports base image downloads and uploads. It is called synchronously from the
	// transfer, at most about once a second per transfer, and must not block. Nil: none.
	Progress func(ProgressEvent)
}

// ProgressEvent is one step of a base image transfer.
type ProgressEvent struct {
	Provider string `json:"provider"`
	Host     string `json:"host"`
	Image    string `json:"image"` // the key in Config.Images
	Phase    string `json:"phase"` // PhaseDownload, PhaseUpload or PhaseCached
	Done     int64  `json:"done"`  // bytes so far
	Total    int64  `json:"total"` // bytes in all; -1 while unknown
}

// Phases of a ProgressEvent.
const (
	PhaseDownload = "download" // fetching the image from its URL into a local file
	PhaseUpload   = "upload"   // streaming the verified file into the host's pool
	PhaseCached   = "cached"   // the image is in the host's pool, with its digest marker
)

// Provider runs instances as libvirt domains on hosts reached over SSH. It is safe for
// concurrent use, also by several processes sharing hosts.
type Provider struct {
	name  string
	cfg   settings
	log   *slog.Logger
	hooks Hooks
	hosts map[string]*hostConns
	http  *http.Client
	now   func() time.Time

	names  providers.KeyedMutex // Create and Delete of one instance
	images providers.KeyedMutex // fetching one base image onto one host
}

var (
	_ providers.Provider  = (*Provider)(nil)
	_ providers.Cataloger = (*Provider)(nil)
	_ providers.Checker   = (*Provider)(nil)
)

// New builds a provider named name (a DNS label: it reaches volume names). It validates cfg
// and does no I/O: hosts are dialled by the first call that needs them.
func New(name string, cfg Config, log *slog.Logger, hooks Hooks) (*Provider, error) {
	p, err := build(name, cfg, log, hooks)
	if err != nil {
		return nil, err
	}
	p.setDial(p.dialSSH)
	if cfg.InsecureIgnoreHostKey {
		p.log.Warn("insecureIgnoreHostKey is set: libvirt hosts' SSH keys are not verified, so anyone on the path can impersonate them")
	}
	return p, nil
}

func build(name string, cfg Config, log *slog.Logger, hooks Hooks) (*Provider, error) {
	if !providers.ValidName(name) {
		return nil, fmt.Errorf("libvirt provider %q: the name must be a DNS-1123 label (it reaches volume names)", name)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("libvirt provider %s: %w", name, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{
		name:  name,
		cfg:   cfg.settings(),
		log:   log.With("provider", name),
		hooks: hooks,
		// No client timeout: the transfer budget bounds each download through its context.
		http: &http.Client{},
		now:  time.Now,
	}, nil
}

func (p *Provider) setDial(dial dialFunc) {
	p.hosts = make(map[string]*hostConns, len(p.cfg.Hosts))
	for _, h := range p.cfg.Hosts {
		p.hosts[h.Name] = newHostConns(h, dial)
	}
}

// Close drops the pooled connections. Calls in flight fail; later calls fail too.
func (p *Provider) Close() error {
	for _, h := range p.hosts {
		h.close()
	}
	return nil
}

// Catalog offers the hosts, machine types and image keys. It never holds URLs, digests,
// users, addresses or key paths.
func (p *Provider) Catalog() providers.Catalog {
	c := providers.Catalog{
		Type:         "libvirt",
		MachineTypes: map[string]providers.MachineType{},
		Images:       sortedKeys(p.cfg.Images),
		Limits:       map[string]int{"diskSizeGb": int(p.cfg.diskBytes >> 30)},
	}
	for _, h := range p.cfg.Hosts {
		c.Hosts = append(c.Hosts, providers.Host{Name: h.Name, MaxConcurrentOps: h.MaxConcurrentOps})
	}
	for k, mt := range p.cfg.MachineTypes {
		c.MachineTypes[k] = providers.MachineType{VCPUs: mt.VCPUs, MemoryMiB: mt.MemoryMiB}
	}
	return c
}

// Instance IDs are hosts/<host>/domains/<name>: self-contained, and neither a host name nor
// an instance name (both DNS labels) can hold the separator.
const (
	idHosts   = "hosts"
	idDomains = "domains"
)

func idOf(host, name string) string { return idHosts + "/" + host + "/" + idDomains + "/" + name }

// parseID returns the host and instance name of an ID. A well-formed ID naming a host the
// config does not have is refused too: a typo must not read as a VM that is gone.
func (p *Provider) parseID(id string) (*hostConns, string, error) {
	parts := strings.Split(id, "/")
	if len(parts) != 4 || parts[0] != idHosts || parts[2] != idDomains || !providers.ValidName(parts[1]) || !providers.ValidName(parts[3]) {
		return nil, "", fmt.Errorf("%w %q: want hosts/<host>/domains/<name>", errBadID, id)
	}
	h := p.hosts[parts[1]]
	if h == nil {
		return nil, "", fmt.Errorf("%w: %q, in ID %q (hosts: %s)", errUnknownHost, parts[1], id, strings.Join(p.hostNames(), ", "))
	}
	return h, parts[3], nil
}

func (p *Provider) hostNames() []string {
	names := make([]string, 0, len(p.cfg.Hosts))
	for _, h := range p.cfg.Hosts {
		names = append(names, h.Name)
	}
	return names
}

// lockName serializes Create and Delete of one instance within this process. Across
// processes the provisioner's per-proxy op lock does.
func (p *Provider) lockName(ctx context.Context, host, name string) (func(), error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.lock)
	defer cancel()
	unlock, err := p.names.Lock(ctx, host+"/"+name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is busy with another create or delete: %w", errBusy, name, err)
	}
	return unlock, nil
}

// orderedHosts is the configured hosts in config order.
func (p *Provider) orderedHosts() []*hostConns {
	hs := make([]*hostConns, 0, len(p.cfg.Hosts))
	for _, h := range p.cfg.Hosts {
		hs = append(hs, p.hosts[h.Name])
	}
	return hs
}
