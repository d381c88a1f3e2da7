package proxmox

import (
	"context"
	"strings"

	"github.com/egressd/egressd/providers"
)

// List returns every VM carrying egressd's managed mark and this provider's name, with its
// marks read from its config. One /cluster/resources answers for the whole cluster (if it
// fails, List fails: GC must not take a partial list for the truth); candidates are VMs with
// the egressd tag or an egress- name (a VM cut off before its config step has no tag yet),
// never templates or containers, and each costs one config read. A candidate whose config
// cannot be read is skipped (GC then leaves it alone) unless the context ended. Running VMs
// list as Provisioning: Get asks the agent for the address.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	res, err := p.api.resources(ctx)
	if err != nil {
		return nil, p.classify(opList, "", err)
	}
	out := []providers.Instance{}
	for _, r := range res {
		if r.Type != "qemu" || r.Template == 1 || !providers.ValidName(r.Name) || (!r.hasTag(tag) && !strings.HasPrefix(r.Name, "egress-")) {
			continue
		}
		cfg, err := p.api.config(ctx, r.Node, r.VMID)
		if err != nil {
			if ctx.Err() != nil {
				return nil, p.classify(opList, "", ctx.Err())
			}
			p.log.Debug("proxmox list: skipping a VM whose config cannot be read", "vmid", r.VMID, "node", r.Node, "error", err.Error())
			continue
		}
		m, found := parseMarks(cfg["description"])
		if !found || !m.Managed || m.Provider != p.name {
			continue
		}
		inst := providers.Instance{ID: idOf(r.VMID, r.Name), Name: r.Name, Host: r.Node, Port: m.Port, Marks: m.contract(),
			State: providers.StateStopped}
		if r.Status == "running" || r.Lock != "" {
			inst.State = providers.StateProvisioning
		}
		out = append(out, inst)
	}
	return out, nil
}
