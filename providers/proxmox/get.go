package proxmox

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/egressd/egressd/providers"
)

// Get reads a VM back: its resource entry, its config (the marks), and when it runs its QMP
// status and the guest agent's interfaces.
//
//	absent, another name, no marks       NotFound (the VMID is not this instance's)
//	locked, or status unknown            Transient (a task holds it; checked before the name:
//	                                     a VM mid-clone has none, F8)
//	running, QMP running, agent address  Running
//	running, agent not up yet (F5)       Provisioning, never NotFound
//	running, QMP paused (F14)            Stopped: egressd does not resume guests
//	stopped, seed not attached           Provisioning (a Create was cut off before its start)
//	stopped, anything else               Stopped
func (p *Provider) Get(ctx context.Context, id string) (providers.Instance, error) {
	vmid, name, err := parseID(id)
	if err != nil {
		return providers.Instance{}, p.classify(opGet, id, err)
	}
	inst, err := p.get(ctx, vmid, name)
	return inst, p.classify(opGet, id, err)
}

func (p *Provider) get(ctx context.Context, vmid int, name string) (providers.Instance, error) {
	res, err := p.api.resources(ctx)
	if err != nil {
		return providers.Instance{}, err
	}
	r, ok := findVMID(res, vmid)
	if !ok {
		return providers.Instance{}, fmt.Errorf("%w: VMID %d", errGone, vmid)
	}
	if r.Lock != "" {
		return providers.Instance{}, fmt.Errorf("%w: VM %d (%s)", errLocked, vmid, r.Lock)
	}
	if r.Name != name {
		p.log.Info("proxmox VMID now holds another VM; the instance is gone", "vmid", vmid, "want", name, "found", r.Name)
		return providers.Instance{}, fmt.Errorf("%w: VMID %d is %q, not %s", errGone, vmid, r.Name, name)
	}
	if r.Status == "unknown" {
		return providers.Instance{}, fmt.Errorf("VM %d: PVE reports status unknown (node %s busy or mid-task)", vmid, r.Node)
	}
	cfg, err := p.api.config(ctx, r.Node, vmid)
	if isGone(err) {
		return providers.Instance{}, fmt.Errorf("%w: VM %d: %w", errGone, vmid, err)
	}
	if err != nil {
		return providers.Instance{}, err
	}
	m, found := parseMarks(cfg["description"])
	if !found || !m.Managed {
		p.log.Info("proxmox VM has our name but no egressd marks; the instance is gone", "vmid", vmid, "name", name)
		return providers.Instance{}, fmt.Errorf("%w: VM %d named %s has no egressd marks", errGone, vmid, name)
	}
	inst := providers.Instance{ID: idOf(vmid, name), Name: name, Host: r.Node, Port: m.Port, Marks: m.contract()}
	switch r.Status {
	case "running":
		return p.running(ctx, inst, r, cfg)
	case "stopped":
		inst.State = providers.StateStopped
		if !strings.Contains(cfg["ide2"], seedFile(name)) {
			inst.State = providers.StateProvisioning
		}
	default:
		inst.State = providers.StateStopped
	}
	return inst, nil
}

// running refines a VM PVE lists as running: paused guests are running in the resources
// (F14), and the address comes from the guest agent (F21).
func (p *Provider) running(ctx context.Context, inst providers.Instance, r resource, cfg vmConfig) (providers.Instance, error) {
	st, err := p.api.status(ctx, r.Node, r.VMID)
	if isGone(err) {
		return providers.Instance{}, fmt.Errorf("%w: VM %d: %w", errGone, r.VMID, err)
	}
	if err != nil {
		return providers.Instance{}, err
	}
	switch st.QMPStatus {
	case "running", "":
	case "prelaunch", "inmigrate", "postmigrate", "finish-migrate":
		inst.State = providers.StateProvisioning
		return inst, nil
	default: // paused, suspended, io-error, internal-error, shutdown, guest-panicked, …
		p.log.Debug("proxmox VM runs but its guest does not", "vmid", r.VMID, "qmpstatus", st.QMPStatus)
		inst.State = providers.StateStopped
		return inst, nil
	}
	ifaces, err := p.api.interfaces(ctx, r.Node, r.VMID)
	if isAgentNotRunning(err) {
		inst.State = providers.StateProvisioning
		return inst, nil
	}
	if err != nil {
		return providers.Instance{}, err
	}
	if addr := pickAddress(ifaces, macOf(cfg["net0"])); addr != "" {
		inst.State, inst.Address = providers.StateRunning, addr
	} else {
		inst.State = providers.StateProvisioning
	}
	return inst, nil
}

// pickAddress is the guest's IPv4 address on the NIC with net0's MAC, else the first usable
// IPv4 address on any NIC but lo. On the MAC's NIC any unicast IPv4 counts, loopback included:
// it is the VM's network, whatever it is (a simulator's VMs live on 127.0.0.0/8).
func pickAddress(ifaces []agentInterface, mac string) string {
	first := func(ifc agentInterface, ok func(netip.Addr) bool) string {
		for _, ip := range ifc.IPAddresses {
			if a, err := netip.ParseAddr(ip.Address); err == nil && a.Is4() && ok(a) {
				return a.String()
			}
		}
		return ""
	}
	if mac != "" {
		for _, ifc := range ifaces {
			if strings.EqualFold(ifc.HWAddress, mac) {
				if a := first(ifc, func(a netip.Addr) bool {
					return !a.IsLinkLocalUnicast() && !a.IsUnspecified() && !a.IsMulticast() && a != netip.IPv4Unspecified()
				}); a != "" {
					return a
				}
			}
		}
	}
	for _, ifc := range ifaces {
		if ifc.Name == "lo" {
			continue
		}
		if a := first(ifc, func(a netip.Addr) bool {
			return !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() && !a.IsMulticast()
		}); a != "" {
			return a
		}
	}
	return ""
}
