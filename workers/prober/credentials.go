package prober

import (
	"time"

	"github.com/egressd/egressd/internal/leaseauth"

	"github.com/egressd/egressd/schemas"
)

// ProbeSubject is who a probe's lease token names, in the proxy's place of a lease ID.
const ProbeSubject = "egressd-probe"

// probeAuth is the credential a probe of proxy presents: the spec's static pair as it is, or,
// for auth.mode "lease", a token of the probers' own, signed with the key of the proxy's
// instance of generation (its status's) and valid
// for the probe's timeout (plus the proxies' clock-skew grace). Without a lease master it
// presents nothing, and the proxy's 407 makes the probe fail, which is the truth: no lease
// would work either.
func (p *Prober) probeAuth(proxy, generation string, a *schemas.Auth, timeout time.Duration) *schemas.Auth {
	if !a.Lease() {
		return a
	}
	m := leaseauth.SigningOf(p.cfg.LeaseMaster)
	if m.IsZero() {
		return nil
	}
	user, pass := m.InstanceKey(proxy, generation).Sign(ProbeSubject, p.cfg.Now().Add(timeout+time.Second))
	return &schemas.Auth{Username: user, Password: pass}
}

// generation is the generation of the instance t's status describes, "" with no status.
func (t *target) generation() string {
	if t.st == nil {
		return ""
	}
	return t.st.generation
}
