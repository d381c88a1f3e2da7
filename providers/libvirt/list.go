package libvirt

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/egressd/egressd/providers"
)

// List returns every domain on every host that carries egressd's managed mark and this
// provider's name, with its marks. A host that cannot be listed fails the whole call: garbage collection must not
// mistake a partial list for the truth. Addresses come from DHCP leases only (one call per
// host), so a running domain on a bridge host lists as Provisioning; Get also asks the agent.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	list := []providers.Instance{}
	for _, h := range p.orderedHosts() {
		insts, err := p.listHost(ctx, h)
		if err != nil {
			return nil, p.classify(opList, "", fmt.Errorf("listing host %s: %w", h.cfg.Name, err))
		}
		list = append(list, insts...)
	}
	return list, nil
}

func (p *Provider) listHost(ctx context.Context, h *hostConns) ([]providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := h.get(ctx)
	if err != nil {
		return nil, err
	}
	doms, err := c.ListDomains(ctx)
	if err != nil {
		return nil, err
	}
	var leases []golibvirt.NetworkDhcpLease
	leasesRead := false
	var out []providers.Instance
	for _, dom := range doms {
		m, found, err := readMarks(ctx, c, dom)
		if err != nil || !found || !m.Managed {
			if err != nil && !libvirtAnswered(err) && !errors.Is(err, errBadMarks) {
				return nil, err
			}
			if err != nil {
				p.log.Debug("libvirt list: skipping a domain whose metadata cannot be read", "host", h.cfg.Name, "domain", dom.Name, "err", err)
			}
			continue
		}
		if m.Provider != p.name {
			// Another provider entry's (two entries may share a host): its own List reports it.
			continue
		}
		state, err := c.DomainState(ctx, dom)
		if isCode(err, golibvirt.ErrNoDomain) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		inst := providers.Instance{ID: idOf(h.cfg.Name, dom.Name), Name: dom.Name, Host: h.cfg.Name,
			State: stateOf(state), Port: m.Port, Marks: m.contract()}
		if running(state) && h.cfg.Network != "" && m.MAC != "" {
			if !leasesRead {
				leases, leasesRead = p.allLeases(ctx, c, h.cfg), true
			}
			if ip := leaseAddress(leases, m.MAC, p.now()); ip != "" {
				inst.State, inst.Address = providers.StateRunning, ip
			}
		}
		out = append(out, inst)
	}
	p.log.Debug("libvirt domains listed", "host", h.cfg.Name, "domains", len(doms), "managed", len(out))
	return out, nil
}

func (p *Provider) allLeases(ctx context.Context, c conn, h HostConfig) []golibvirt.NetworkDhcpLease {
	net, err := c.LookupNetwork(ctx, h.Network)
	if err == nil {
		var leases []golibvirt.NetworkDhcpLease
		if leases, err = c.DHCPLeases(ctx, net, ""); err == nil {
			return leases
		}
	}
	p.log.Debug("libvirt list: no DHCP leases", "host", h.Name, "network", h.Network, "err", err)
	return nil
}

// instancePrefix is how every instance name starts (providers.InstanceName); volumes of
// other names are never taken for leftovers.
const instancePrefix = "egress-"

// Leftovers lists (providers.LeftoverLister), on every host, the overlay and seed volumes (<name>.qcow2,
// <name>-seed.iso) of instance names that have no domain. A Create in progress has such
// volumes for a moment too, so a collector must delete only names no live proxy holds, and
// only old ones. Like List, a host that cannot be read fails the whole call.
func (p *Provider) Leftovers(ctx context.Context) ([]providers.Leftover, error) {
	var out []providers.Leftover
	for _, h := range p.orderedHosts() {
		found, err := p.leftoversOn(ctx, h)
		if err != nil {
			return nil, p.classify(opList, "", fmt.Errorf("leftover volumes on host %s: %w", h.cfg.Name, err))
		}
		out = append(out, found...)
	}
	return out, nil
}

func (p *Provider) leftoversOn(ctx context.Context, h *hostConns) ([]providers.Leftover, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := h.get(ctx)
	if err != nil {
		return nil, err
	}
	pool, err := c.LookupPool(ctx, h.cfg.Pool)
	if isCode(err, golibvirt.ErrNoStoragePool) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	vols, err := c.ListVolumes(ctx, pool)
	if err != nil {
		return nil, err
	}
	byName := map[string][]golibvirt.StorageVol{}
	for _, v := range vols {
		if name, ok := instanceOfVolume(v.Name); ok {
			byName[name] = append(byName[name], v)
		}
	}
	var out []providers.Leftover
	for _, name := range sortedKeys(byName) {
		_, err := c.LookupDomain(ctx, name)
		if err == nil {
			continue
		}
		if !isCode(err, golibvirt.ErrNoDomain) {
			return nil, err
		}
		lo := providers.Leftover{ID: idOf(h.cfg.Name, name), Host: h.cfg.Name, Name: name}
		for _, v := range byName[name] {
			lo.Parts = append(lo.Parts, v.Name)
			if doc, err := c.VolumeXML(ctx, v); err == nil {
				if t := volumeModified(doc); t.After(lo.ModifiedAt) {
					lo.ModifiedAt = t
				}
			}
		}
		slices.Sort(lo.Parts)
		out = append(out, lo)
	}
	return out, nil
}

// instanceOfVolume returns the instance name an overlay or seed volume belongs to.
func instanceOfVolume(vol string) (string, bool) {
	for _, suffix := range []string{".qcow2", "-seed.iso"} {
		if name, ok := strings.CutSuffix(vol, suffix); ok && strings.HasPrefix(name, instancePrefix) && providers.ValidName(name) {
			return name, true
		}
	}
	return "", false
}

// volumeModified reads <target><timestamps><mtime> ("seconds.nanoseconds") from a volume's XML.
func volumeModified(doc string) time.Time {
	var v struct {
		MTime string `xml:"target>timestamps>mtime"`
	}
	if xml.Unmarshal([]byte(doc), &v) != nil || v.MTime == "" {
		return time.Time{}
	}
	secs, frac, _ := strings.Cut(v.MTime, ".")
	s, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return time.Time{}
	}
	var ns int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		ns, _ = strconv.ParseInt(frac, 10, 64)
	}
	return time.Unix(s, ns).UTC()
}
