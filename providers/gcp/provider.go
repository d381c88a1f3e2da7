// Package gcp runs egressd's forward proxies as Compute Engine VMs, through the real
// cloud.google.com/go/compute/apiv1 REST client. It imports no NATS.
//
// Every instance carries the marks as labels, its user-data as the `user-data` metadata item
// (cloud-init reads it) and the proxy's port and credential as the `egressd-proxy` item
// (ProxyConfig), and a network tag that the ingress firewall rule egressd keeps for its
// network and port targets. Inserts are asynchronous: Get reads the insert operation when
// the instance is not there, so a quota or stockout failure after the insert was accepted is
// reported as such (Quota) instead of a vanished instance.
package gcp

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/providers"
)

// Provider runs instances as Compute Engine VMs in the configured zones. It is safe for
// concurrent use, also by several processes sharing a project.
type Provider struct {
	name    string
	cfg     settings
	log     *slog.Logger
	clients *clientPool
	now     func() time.Time

	names     providers.KeyedMutex // Create and Delete of one instance
	firewalls providers.KeyedMutex // ensuring and collecting one firewall rule
	ruleUsers ruleUsers            // Creates in flight per rule
}

var (
	_ providers.Provider       = (*Provider)(nil)
	_ providers.Cataloger      = (*Provider)(nil)
	_ providers.Checker        = (*Provider)(nil)
	_ providers.LeftoverLister = (*Provider)(nil)
)

// New builds a provider named name (a DNS label: it reaches labels and rule names). It
// validates cfg and does no I/O: credentials are read by the first call that needs them.
func New(name string, cfg Config, log *slog.Logger) (*Provider, error) {
	if !providers.ValidName(name) {
		return nil, fmt.Errorf("gcp provider %q: the name must be a DNS-1123 label (it reaches instance labels)", name)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gcp provider %s: %w", name, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := cfg.settings()
	return &Provider{
		name:    name,
		cfg:     s,
		log:     log.With("provider", name),
		clients: &clientPool{cfg: s},
		now:     time.Now,
	}, nil
}

// Close closes the SDK clients. Calls in flight finish; later calls fail.
func (p *Provider) Close() error {
	p.clients.close()
	return nil
}

// Catalog offers the zones, machine types and image keys. It never holds credentials,
// endpoints or image URLs.
func (p *Provider) Catalog() providers.Catalog {
	c := providers.Catalog{
		Type:         "gcp",
		MachineTypes: map[string]providers.MachineType{},
		Images:       slices.Sorted(maps.Keys(p.cfg.Images)),
		Limits:       map[string]int{"diskSizeGb": p.cfg.DiskSizeGb},
	}
	for _, z := range p.cfg.Zones {
		c.Hosts = append(c.Hosts, providers.Host{Name: z.Name, MaxConcurrentOps: z.MaxConcurrentOps})
	}
	for k, mt := range p.cfg.MachineTypes {
		c.MachineTypes[k] = providers.MachineType{VCPUs: mt.VCPUs, MemoryMiB: mt.MemoryMiB}
	}
	return c
}

// Instance IDs are zones/<zone>/instances/<name>: self-contained, and neither a zone nor an
// instance name (both DNS labels) can hold the separator. An ID carries no operation: List
// must give the ID Create gave, and List cannot know the insert operation; Get finds it by
// the instance's URL when it needs it.
const (
	idZones     = "zones"
	idInstances = "instances"
)

func idOf(zone, name string) string { return idZones + "/" + zone + "/" + idInstances + "/" + name }

// ParseID returns the zone and instance name of an ID, or an error saying what is wrong.
func ParseID(id string) (zone, name string, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 4 || parts[0] != idZones || parts[2] != idInstances || !providers.ValidName(parts[1]) || !resourceName.MatchString(parts[3]) {
		return "", "", fmt.Errorf("%w %q: want zones/<zone>/instances/<name>", errBadID, id)
	}
	return parts[1], parts[3], nil
}

// parseID is ParseID, refusing a zone the config does not have: a typo must not read as a
// VM that is gone.
func (p *Provider) parseID(id string) (string, string, error) {
	zone, name, err := ParseID(id)
	if err != nil {
		return "", "", err
	}
	if !p.hasZone(zone) {
		return "", "", fmt.Errorf("%w: %q, in ID %q (zones: %s)", errUnknownZone, zone, id, strings.Join(p.zoneNames(), ", "))
	}
	return zone, name, nil
}

func (p *Provider) hasZone(zone string) bool {
	for _, z := range p.cfg.Zones {
		if z.Name == zone {
			return true
		}
	}
	return false
}

func (p *Provider) zoneNames() []string {
	names := make([]string, 0, len(p.cfg.Zones))
	for _, z := range p.cfg.Zones {
		names = append(names, z.Name)
	}
	return names
}

// call bounds one API call by the call budget as well as ctx.
func (p *Provider) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.cfg.call)
}

// lockName serializes Create and Delete of one instance within this process. Across
// processes the provisioner's per-proxy op lock does, and the service's unique names.
func (p *Provider) lockName(ctx context.Context, zone, name string) (func(), error) {
	ctx, cancel := p.call(ctx)
	defer cancel()
	unlock, err := p.names.Lock(ctx, zone+"/"+name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is busy with another create or delete: %w", errBusy, name, err)
	}
	return unlock, nil
}

func (p *Provider) instanceURL(zone, name string) string {
	return selfLinkBase + "projects/" + p.cfg.Project + "/zones/" + zone + "/instances/" + name
}
