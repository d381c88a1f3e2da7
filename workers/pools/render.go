package pools

import (
	"encoding/json"
	"hash/fnv"
	"maps"
	"reflect"
	"time"

	"github.com/egressd/egressd/schemas"
)

// render is the spec a member at placement idx should have, drained or not: the template,
// the placement's fields over the template's (schemas.PoolSpec.Place, the one home of that
// rule, which validation also uses to find repeated placements), the pool as owner and as the
// attribute crawlers select it by.
func render(p schemas.PoolSpec, pool string, idx int, drain bool) schemas.ProxySpec {
	s := p.Template
	if idx >= 0 && idx < len(p.Placements) {
		pl := p.Place(idx)
		s.Provider = pl.Provider
		s.Placement = schemas.Placement{Region: pl.Region, Zone: pl.Zone, MachineType: pl.MachineType, Image: pl.Image}
	}
	s.Attributes = maps.Clone(p.Template.Attributes)
	if s.Attributes == nil {
		s.Attributes = map[string]string{}
	}
	s.Attributes[schemas.PoolAttribute] = pool
	if s.MaxLeases != nil {
		n := *s.MaxLeases
		s.MaxLeases = &n
	}
	if s.Auth != nil {
		a := *s.Auth
		s.Auth = &a
	}
	if s.Endpoint != nil {
		e := *s.Endpoint
		s.Endpoint = &e
	}
	s.Pool, s.Drain = pool, drain
	return s
}

// identity is what of a spec makes its instance: changing it replaces the instance (the
// reconciler's rule, schemas.ProxySpec.Hash, plus the provider and mode), so a pool rolls
// such a change member by member instead of writing it into the specs.
type identity struct {
	mode, provider, cloudInit, cloudInitRef string
	placement                               schemas.Placement
	port                                    int
	endpoint                                schemas.Endpoint
}

func identityOf(s schemas.ProxySpec) identity {
	id := identity{mode: s.Mode, provider: s.Provider, cloudInit: s.CloudInit, cloudInitRef: s.CloudInitRef,
		placement: s.Placement, port: s.Port}
	if s.Endpoint != nil {
		id.endpoint = *s.Endpoint
	}
	return id
}

// inPlace is cur with everything a pool may change without a new instance taken from want:
// attributes, lease limit, health, auth, lifetime (it applies to the next instance), owner and
// drain.
func inPlace(cur, want schemas.ProxySpec) schemas.ProxySpec {
	cur.Attributes, cur.MaxLeases, cur.HealthCheck, cur.Auth = want.Attributes, want.MaxLeases, want.HealthCheck, want.Auth
	cur.MaxLifetimeSeconds = want.MaxLifetimeSeconds
	cur.Pool, cur.Drain = want.Pool, want.Drain
	return cur
}

// sameSpec compares two specs with their defaults applied.
func sameSpec(a, b schemas.ProxySpec) bool {
	if len(a.Attributes) == 0 && len(b.Attributes) == 0 {
		a.Attributes, b.Attributes = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// encode is the stored form of a member spec, parsed back so that it compares equal to what
// a reader parses.
func encode(s schemas.ProxySpec) ([]byte, schemas.ProxySpec, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, schemas.ProxySpec{}, err
	}
	back, err := schemas.ParseProxySpec(b)
	return b, back, err
}

// rotateAt is when a member reaches its age limit: maxAgeSeconds less a share of the jitter
// fixed by its name, so that the same member gets the same time from every controller and
// members created together spread their replacements. Zero: never.
func rotateAt(r schemas.Rotation, name string, created time.Time) time.Time {
	if r.MaxAgeSeconds <= 0 || created.IsZero() {
		return time.Time{}
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	share := float64(h.Sum64()>>11) / float64(1<<53) // uniform in [0, 1)
	jitter := time.Duration(share * float64(time.Duration(r.JitterSeconds)*time.Second))
	return created.Add(time.Duration(r.MaxAgeSeconds)*time.Second - jitter)
}

// provisionAllowance is how long a member replaced ahead of its instance's lifetime gives its
// successor to become Ready, beside the drain timeout it gives its own leases.
const provisionAllowance = 5 * time.Minute

// expiry is when a member's current instance was made and when its lifetime ends, as its
// status says (the end comes from the instance's own mark); until is zero without one.
type expiry struct{ from, until time.Time }

// lifetimeRotateAt is when a member is replaced ahead of its instance's lifetime's end: early
// enough for a successor to become Ready and the member to drain (the drain timeout plus
// provisionAllowance) before the collector deletes the instance, but not before half of the
// lifetime has passed. Zero: no lifetime.
func lifetimeRotateAt(e expiry, drain time.Duration) time.Time {
	if e.until.IsZero() {
		return time.Time{}
	}
	lead := drain + provisionAllowance
	if !e.from.IsZero() && e.until.After(e.from) {
		lead = min(lead, e.until.Sub(e.from)/2)
	}
	return e.until.Add(-lead)
}
