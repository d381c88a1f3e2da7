package schemas

import (
	"maps"
	"slices"
)

// InstanceAuth follows, for one proxy, the credentials its current instance carries
// (decision 87): the spec's auth at the revision of proxies the proxy's status names
// (events.ProxyStatus.AuthRevision). That is the spec's own auth, unless the spec's
// credentials changed and the instance waits for a successor that has them (a provider that
// cannot update them in place). The leasers hand out, and the probers present, what it
// resolves; it never reaches a status, an event or a log.
//
// It keeps the auth of the few newest revisions it saw, from the status's on, so that a
// watch that runs through a credential change resolves without a read; a revision it never
// saw (a restart in the middle of a rollout) is Missing, to be read and Resolved. The zero
// value is ready to use. It is not safe for concurrent use.
type InstanceAuth struct {
	specRev uint64
	want    uint64 // the status's AuthRevision; 0: the spec's (an older reconciler)
	byRev   map[uint64]*Auth
}

// keptRevisions bounds what InstanceAuth keeps: proxies keeps 5 revisions of a key.
const keptRevisions = 8

// SetSpec records the spec's auth at rev (nil: none, or no spec).
func (c *InstanceAuth) SetSpec(rev uint64, a *Auth) {
	c.specRev = rev
	c.Resolve(rev, a)
}

// SetStatus records the revision whose auth the instance carries (0: the spec's).
func (c *InstanceAuth) SetStatus(authRevision uint64) {
	c.want = authRevision
	c.prune()
}

// Resolve records the auth of rev, read back from proxies.
func (c *InstanceAuth) Resolve(rev uint64, a *Auth) {
	if c.byRev == nil {
		c.byRev = map[uint64]*Auth{}
	}
	c.byRev[rev] = a
	c.prune()
}

// Auth is the auth the instance carries, and whether it is known. Unknown means the proxy
// must not be leased or probed with credentials until it is read (fail closed).
func (c *InstanceAuth) Auth() (*Auth, bool) {
	rev := c.want
	if rev == 0 {
		rev = c.specRev
	}
	a, ok := c.byRev[rev]
	return a, ok
}

// Missing is the revision to read for Resolve, when Auth is unknown.
func (c *InstanceAuth) Missing() (uint64, bool) {
	if _, ok := c.Auth(); ok || c.want == 0 {
		return 0, false
	}
	return c.want, true
}

// prune drops revisions older than the one the instance carries, and the oldest beyond
// keptRevisions.
func (c *InstanceAuth) prune() {
	revs := slices.Sorted(maps.Keys(c.byRev))
	for i, r := range revs {
		if (c.want != 0 && r < c.want) || (c.want == 0 && r < c.specRev) || len(revs)-i > keptRevisions {
			delete(c.byRev, r)
		}
	}
}
