package provisioner

import (
	"errors"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/schemas"
)

// credentials is what the provider delivers to proxy's instance for a spec's auth: a static
// password, or, for auth.mode "lease", the proxy's own key, derived from the lease master, as
// the line of its auth file. Nothing here is logged; both travel as providers.Secret.
func (p *Provisioner) credentials(op events.Op, a *schemas.Auth) (*providers.Auth, error) {
	switch {
	case a == nil:
		return nil, nil
	case a.Lease():
		keys := leaseauth.InstanceKeys(p.cfg.LeaseMaster, op.Proxy, op.Generation)
		if len(keys) == 0 {
			return nil, providers.Wrap(providers.ErrPermanent, "create", p.cfg.Provider, op.InstanceName,
				errors.New("auth.mode lease needs the lease master, and this provisioner has none (`egressd setup` creates it)"))
		}
		return &providers.Auth{LeaseKey: providers.Secret(leaseauth.FileLines(keys...))}, nil
	default:
		return &providers.Auth{Username: a.Username, Password: providers.Secret(a.Password)}, nil
	}
}
