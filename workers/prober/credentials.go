package prober

import (
	"context"
	"time"

	"github.com/egressd/egressd/kvstore"
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
	if p.cfg.LeaseMaster.IsZero() {
		return nil
	}
	user, pass := p.cfg.LeaseMaster.InstanceKey(proxy, generation).Sign(ProbeSubject, p.cfg.Now().Add(timeout+time.Second))
	return &schemas.Auth{Username: user, Password: pass}
}

// generation is the generation of the instance t's status describes, "" with no status.
func (t *target) generation() string {
	if t.st == nil {
		return ""
	}
	return t.st.generation
}

// followAuth tells t's credentials which spec revision its instance carries (decision 87)
// and, when the prober never saw that revision (it started in the middle of a credential
// rollout), reads it back from proxies. Unknown credentials probe with none: the proxy's 407
// says no lease could work either, until they are known.
func (l *loop) followAuth(ctx context.Context, t *target) {
	var rev uint64
	if t.st != nil {
		rev = t.st.authRevision
	}
	t.creds.SetStatus(rev)
	missing, ok := t.creds.Missing()
	if !ok {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	b, err := kvstore.GetAt(rctx, l.p.cfg.Buckets.Proxies, t.name, missing)
	if err != nil {
		l.p.log.Warn("read the credentials the proxy's instance carries", "proxy", t.name, "revision", missing, "err", err)
		return
	}
	if s, err := schemas.ParseProxySpec(b); err == nil {
		t.creds.Resolve(missing, s.Auth)
	}
}

// instanceAuth is the auth t's instance carries, nil while unknown.
func (t *target) instanceAuth() *schemas.Auth {
	a, _ := t.creds.Auth()
	return a
}
