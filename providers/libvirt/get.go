package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/egressd/egressd/providers"
)

// Get reads the domain back: its marks from its metadata, its state from libvirt, and, when
// it runs, its address from the guest agent or the network's DHCP lease for its MAC.
//
//	libvirt state              Instance state
//	no domain                  error NotFound
//	nostate                    Provisioning
//	running, blocked           Running with an address, else Provisioning
//	paused, shutdown, shutoff,
//	crashed, pmsuspended, else Stopped
func (p *Provider) Get(ctx context.Context, id string) (providers.Instance, error) {
	h, name, err := p.parseID(id)
	if err != nil {
		return providers.Instance{}, p.classify(opGet, id, err)
	}
	inst, err := p.get(ctx, h, name)
	return inst, p.classify(opGet, id, err)
}

func (p *Provider) get(ctx context.Context, h *hostConns, name string) (providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return providers.Instance{}, err
	}
	c, err := h.get(ctx)
	if err != nil {
		return providers.Instance{}, err
	}
	dom, err := c.LookupDomain(ctx, name)
	if err != nil {
		if isCode(err, golibvirt.ErrNoDomain) {
			p.log.Debug("libvirt domain not found", "host", h.cfg.Name, "name", name)
		}
		return providers.Instance{}, err
	}
	m, _, err := readMarks(ctx, c, dom)
	if err != nil {
		return providers.Instance{}, err
	}
	inst, err := p.describe(ctx, c, h, dom, m)
	if err == nil {
		p.log.Debug("libvirt domain fetched", "host", h.cfg.Name, "name", name, "state", inst.State, "address", inst.Address)
	}
	return inst, err
}

// readMarks reads egressd's metadata element; found is false for a domain without one.
func readMarks(ctx context.Context, c conn, dom golibvirt.Domain) (marks, bool, error) {
	raw, err := c.DomainMetadata(ctx, dom, metadataNS)
	if isCode(err, golibvirt.ErrNoDomainMetadata) {
		return marks{}, false, nil
	}
	if err != nil {
		return marks{}, false, err
	}
	m, err := parseMarks(raw)
	if err != nil {
		return marks{}, false, fmt.Errorf("domain %s: %w", dom.Name, err)
	}
	return m, true, nil
}

// describe reports a domain whose marks are m.
func (p *Provider) describe(ctx context.Context, c conn, h *hostConns, dom golibvirt.Domain, m marks) (providers.Instance, error) {
	inst := providers.Instance{
		ID: idOf(h.cfg.Name, dom.Name), Name: dom.Name, Host: h.cfg.Name, Port: m.Port, Marks: m.contract(),
	}
	state, err := c.DomainState(ctx, dom)
	if err != nil {
		return providers.Instance{}, err
	}
	inst.State = stateOf(state)
	if inst.State == providers.StateProvisioning && running(state) && m.MAC != "" {
		addr, err := p.address(ctx, c, h.cfg, dom, m.MAC)
		if err != nil {
			return providers.Instance{}, err
		}
		if addr != "" {
			// EgressIP stays unset: the guest's address is where the proxy listens, not
			// where its traffic is known to leave from. The default libvirt network NATs
			// guests behind the host's address; a routed or open network, or a bridge, may
			// still be NATed by a router beyond the host, of which libvirt knows nothing.
			// A wrong expectation would mark healthy proxies EgressMismatch; unset, the
			// probers record the egress the check target sees without judging it.
			inst.State, inst.Address = providers.StateRunning, addr
		}
	}
	return inst, nil
}

func running(s golibvirt.DomainState) bool {
	return s == golibvirt.DomainRunning || s == golibvirt.DomainBlocked
}

// stateOf maps a libvirt state, before the address is known: a running domain is
// Provisioning until it has one.
func stateOf(s golibvirt.DomainState) providers.State {
	switch s {
	case golibvirt.DomainNostate, golibvirt.DomainRunning, golibvirt.DomainBlocked:
		return providers.StateProvisioning
	default:
		return providers.StateStopped
	}
}

// address finds the guest's IPv4 address on the NIC with mac: first from the guest agent,
// then from the network's DHCP leases. A source that answers "nothing yet" (no agent in the
// guest, no lease) is a missing address; a source that cannot be read at all is not (H3): if
// no source could be read, the answer is an error (Transient), not "no address", which would
// demote a running proxy.
func (p *Provider) address(ctx context.Context, c conn, h HostConfig, dom golibvirt.Domain, mac string) (string, error) {
	var failures []error
	ifaces, err := c.AgentInterfaces(ctx, dom)
	switch {
	case err == nil:
		if ip := agentAddress(ifaces, mac); ip != "" {
			return ip, nil
		}
	case ctx.Err() != nil:
		return "", err
	case !libvirtAnswered(err):
		failures = append(failures, fmt.Errorf("guest agent: %w", err))
	}
	if h.Network != "" {
		ip, err := p.leaseAddress(ctx, c, h.Network, mac)
		switch {
		case err == nil:
			return ip, nil
		case ctx.Err() != nil:
			return "", err
		case !libvirtAnswered(err):
			failures = append(failures, fmt.Errorf("DHCP leases: %w", err))
		}
	}
	sources := 1
	if h.Network != "" {
		sources = 2
	}
	if len(failures) == sources {
		return "", fmt.Errorf("%w of domain %s: %w", errNoAddressRead, dom.Name, errors.Join(failures...))
	}
	return "", nil
}

func (p *Provider) leaseAddress(ctx context.Context, c conn, network, mac string) (string, error) {
	net, err := c.LookupNetwork(ctx, network)
	if err != nil {
		return "", err
	}
	leases, err := c.DHCPLeases(ctx, net, mac)
	if err != nil {
		return "", err
	}
	return leaseAddress(leases, mac, p.now()), nil
}

// agentAddress picks the first usable IPv4 address of the interface with the domain's MAC:
// a guest may have other interfaces (docker0, a VPN) whose addresses no client can reach.
func agentAddress(ifaces []golibvirt.DomainInterface, mac string) string {
	for _, iface := range ifaces {
		if len(iface.Hwaddr) == 0 || !strings.EqualFold(iface.Hwaddr[0], mac) {
			continue
		}
		for _, a := range iface.Addrs {
			if a.Type == int32(golibvirt.IPAddrTypeIpv4) && usable(a.Addr) {
				return a.Addr
			}
		}
	}
	return ""
}

// leaseAddress picks the newest unexpired IPv4 lease for mac. libvirt keeps a deleted
// domain's lease for up to an hour; the MAC is random per domain, and expiry is checked too.
func leaseAddress(leases []golibvirt.NetworkDhcpLease, mac string, now time.Time) string {
	best, bestExpiry := "", int64(0)
	for _, l := range leases {
		if len(l.Mac) == 0 || !strings.EqualFold(l.Mac[0], mac) || l.Type != int32(golibvirt.IPAddrTypeIpv4) {
			continue
		}
		if l.Expirytime != 0 && l.Expirytime <= now.Unix() {
			continue
		}
		if usable(l.Ipaddr) && (best == "" || l.Expirytime > bestExpiry) {
			best, bestExpiry = l.Ipaddr, l.Expirytime
		}
	}
	return best
}

func usable(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() && !a.IsMulticast()
}

func stateWord(s golibvirt.DomainState) string {
	switch s {
	case golibvirt.DomainNostate:
		return "nostate"
	case golibvirt.DomainRunning:
		return "running"
	case golibvirt.DomainBlocked:
		return "blocked"
	case golibvirt.DomainPaused:
		return "paused"
	case golibvirt.DomainShutdown:
		return "shutting down"
	case golibvirt.DomainShutoff:
		return "shut off"
	case golibvirt.DomainCrashed:
		return "crashed"
	case golibvirt.DomainPmsuspended:
		return "pmsuspended"
	}
	return fmt.Sprintf("state %d", s)
}

func poolStateWord(s golibvirt.StoragePoolState) string {
	switch s {
	case golibvirt.StoragePoolInactive:
		return "inactive"
	case golibvirt.StoragePoolBuilding:
		return "building"
	case golibvirt.StoragePoolRunning:
		return "running"
	case golibvirt.StoragePoolDegraded:
		return "degraded"
	case golibvirt.StoragePoolInaccessible:
		return "inaccessible"
	}
	return fmt.Sprintf("state %d", s)
}
