package leaser

import (
	"context"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// resolvingAuth wraps the status watch's fold: after it, a proxy whose instance carries
// credentials of a spec revision the view never saw (a replica started in the middle of a
// credential rollout, decision 87) has that revision read back from proxies. Until it is,
// or if proxies no longer keeps it, the proxy is not leased: no grant hands out credentials
// its instance may refuse.
func (l *Leaser) resolvingAuth(ctx context.Context, apply func(jetstream.KeyValueEntry)) func(jetstream.KeyValueEntry) {
	return func(e jetstream.KeyValueEntry) {
		apply(e)
		name := e.Key()
		rev, missing := l.view.fleet.MissingAuth(name)
		if !missing {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, l.cfg.RequestBudget)
		defer cancel()
		b, err := kvstore.GetAt(rctx, l.cfg.Buckets.Proxies, name, rev)
		if err != nil {
			l.log.Warn("read the credentials the proxy's instance carries: it is not leased until they are known", "proxy", name, "revision", rev, "err", err)
			return
		}
		spec, err := schemas.ParseProxySpec(b)
		if err != nil {
			l.log.Warn("the spec revision the proxy's instance was built from does not parse", "proxy", name, "revision", rev, "err", err)
			return
		}
		l.view.fleet.ResolveAuth(name, rev, spec.Auth)
	}
}
