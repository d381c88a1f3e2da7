package gcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/egressd/egressd/providers"
)

// idFirewalls is how a leftover firewall rule's ID starts: firewalls/<rule>. Only Delete
// takes it.
const idFirewalls = "firewalls"

// Leftovers lists (providers.LeftoverLister) the firewall rules this provider made that no
// instance uses: Delete collects a rule with the last instance that used it, but not when
// that instance's deletion outlasted the delete budget, nor when the one instance that
// needed it never came to be (its insert failed). A rule is listed under the first zone,
// since rules are global and the collector sweeps per host. Like List, an instance list it
// cannot vouch for fails the call.
func (p *Provider) Leftovers(ctx context.Context) ([]providers.Leftover, error) {
	if err := ctx.Err(); err != nil {
		return nil, p.classify(opList, "", err)
	}
	c, release, err := p.clients.get(ctx)
	if err != nil {
		return nil, p.classify(opList, "", err)
	}
	defer release()
	out, err := p.leftovers(ctx, c)
	return out, p.classify(opList, "", err)
}

func (p *Provider) leftovers(ctx context.Context, c *clients) ([]providers.Leftover, error) {
	rules, err := p.ownRules(ctx, c)
	if err != nil || len(rules) == 0 {
		return nil, err
	}
	insts, err := p.listInstances(ctx, c, "")
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, inst := range insts {
		used[inst.GetLabels()[labelFirewall]] = true
	}
	var out []providers.Leftover
	for _, fw := range rules {
		if used[fw.GetName()] {
			continue
		}
		made, _ := time.Parse(time.RFC3339Nano, fw.GetCreationTimestamp())
		out = append(out, providers.Leftover{ID: idFirewalls + "/" + fw.GetName(), Host: p.cfg.Zones[0].Name,
			Name: fw.GetName(), Parts: []string{"firewall rule " + fw.GetName()}, ModifiedAt: made.UTC()})
	}
	return out, nil
}

// ownRules are the firewall rules whose marks name this provider.
func (p *Provider) ownRules(ctx context.Context, c *clients) ([]*computepb.Firewall, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	it := c.fw.List(cctx, &computepb.ListFirewallsRequest{Project: p.cfg.Project})
	var out []*computepb.Firewall
	for {
		fw, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, err
		}
		var m firewallMarks
		if !strings.HasPrefix(fw.GetName(), "egressd-") || json.Unmarshal([]byte(fw.GetDescription()), &m) != nil || !m.Managed || m.Provider != p.name {
			continue
		}
		out = append(out, fw)
	}
	slices.SortFunc(out, func(a, b *computepb.Firewall) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// deleteRule is Delete of a leftover's ID: the rule goes if, looked at again under its lock,
// no instance uses it.
func (p *Provider) deleteRule(ctx context.Context, id, name string) error {
	if !resourceName.MatchString(name) || !strings.HasPrefix(name, "egressd-") {
		return p.classify(opDelete, id, fmt.Errorf("%w %q: want firewalls/egressd-<rule>", errBadID, id))
	}
	c, release, err := p.clients.get(ctx)
	if err != nil {
		return p.classify(opDelete, id, err)
	}
	defer release()
	cctx, cancel := p.call(ctx)
	fw, err := c.fw.Get(cctx, &computepb.GetFirewallRequest{Project: p.cfg.Project, Firewall: name})
	cancel()
	if isCode(err, http.StatusNotFound) {
		return nil
	}
	if err != nil {
		return p.classify(opDelete, id, err)
	}
	var m firewallMarks
	if json.Unmarshal([]byte(fw.GetDescription()), &m) != nil || !m.Managed || m.Provider != p.name {
		return p.classify(opDelete, id, fmt.Errorf("%w: firewall rule %s carries no marks of this provider; egressd does not delete it", errNotOurs, name))
	}
	return p.classify(opDelete, id, p.collectFirewall(ctx, c, name, m.Installation))
}
