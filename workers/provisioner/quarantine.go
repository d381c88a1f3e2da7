package provisioner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers"
)

// avoid is what is in quarantine now (address_quarantine, written by the pool controller),
// for a create's CreateRequest.Avoid: the provider is given the quarantine as data, since it
// may not read NATS itself. The bucket holds few records (burned addresses, for a day or so)
// and creates are rare, so it is read whole for each. A bucket that cannot be read fails the
// create as transient rather than risk handing a burned address out (fail closed); a
// provisioner without the bucket (an installation from before quarantine) has nothing in it.
func (p *Provisioner) avoid(ctx context.Context, op events.Op) ([]netip.Prefix, error) {
	kv := p.cfg.Buckets.Quarantine
	if kv == nil {
		return nil, nil
	}
	entries, err := kvstore.Latest(ctx, kv)
	if err != nil {
		return nil, providers.Wrap(providers.ErrTransient, "create", p.cfg.Provider, op.InstanceName, fmt.Errorf("read the quarantine: %w", err))
	}
	now := p.cfg.Now()
	var out []netip.Prefix
	for _, e := range entries {
		var q events.Quarantine
		if json.Unmarshal(e.Value(), &q) != nil || !q.Live(now) {
			continue // a record this version cannot read avoids nothing; an expired one is over
		}
		out = append(out, q.Avoid()...)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return slices.Compact(out), nil
}
