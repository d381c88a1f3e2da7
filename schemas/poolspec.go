package schemas

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
)

// Spread strategies of a pool's placements.
const (
	SpreadRoundRobin  = "round-robin"  // members spread evenly over the placements, in order
	SpreadLeastLoaded = "least-loaded" // a new member goes where the fewest proxies of the fleet run
)

// Defaults applied by ParsePoolSpec.
const (
	DefaultMaxSurge            = 1
	DefaultDrainTimeoutSeconds = 900
	DefaultRecycleWindow       = 3600
	MaxReplicas                = 1000
	MaxPlacements              = 100
	// A maximum age is at least a minute, so that rotation never churns, and at most a year,
	// so that it converts to a time.Duration without overflowing.
	MinRotationAge = 60
	MaxRotationAge = 365 * 86400
)

// MemberSuffixLen is the length of the random suffix of a member's name, <pool>-<suffix>;
// MaxPoolNameLen leaves room for it within a DNS-1123 label.
const (
	MemberSuffixLen = 5
	MaxPoolNameLen  = 63 - 1 - MemberSuffixLen
)

// PoolSpec v1: a fleet of proxies declared as one document, the value of a key in the pools
// bucket (DESIGN §5.7). Its controller writes the members into proxies as ordinary proxies.
type PoolSpec struct {
	V          int             `json:"v,omitempty"`
	Template   ProxySpec       `json:"template"`
	Replicas   *int            `json:"replicas,omitempty"`
	Placements []PoolPlacement `json:"placements,omitempty"`
	Spread     string          `json:"spread,omitempty"`
	Rotation   Rotation        `json:"rotation,omitzero"`
	Recycle    *Recycle        `json:"recycle,omitempty"`
	Leases     *PoolLeases     `json:"leases,omitempty"`
	// Autoscale sets the member count from the demand the leasers measure, instead of
	// replicas (autoscale.go); exactly one of the two is given.
	Autoscale *Autoscale `json:"autoscale,omitempty"`
}

// PoolLeases tunes the lease service for the pool's members.
type PoolLeases struct {
	// MaxPerHolder caps the leases one holder may hold on the pool's members at once,
	// overriding the leaser's default (leases.maxPerHolder); 0 lifts the cap in this pool.
	MaxPerHolder *int `json:"maxPerHolder,omitempty"`
}

// MaxPerHolder bounds PoolLeases.MaxPerHolder, like maxLeases.
const MaxPerHolder = 10000

// PoolPlacement is one place members are spread over; an empty field keeps the template's.
type PoolPlacement struct {
	Provider    string `json:"provider,omitempty"`
	Region      string `json:"region,omitempty"`
	Zone        string `json:"zone,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	Image       string `json:"image,omitempty"`
}

// Rotation replaces members successor-first: by age, and whenever the template changes.
type Rotation struct {
	MaxAgeSeconds int `json:"maxAgeSeconds,omitempty"` // 0: members never age out
	// JitterSeconds spreads the replacements: each member's age limit is maxAgeSeconds less
	// a share of it fixed by the member's name, so a pool created at once does not rotate at once.
	JitterSeconds       int  `json:"jitterSeconds,omitempty"`
	MaxSurge            *int `json:"maxSurge,omitempty"`     // members above replicas while replacing; default 1
	MinAvailable        *int `json:"minAvailable,omitempty"` // Ready members rotation keeps; default replicas (replicas-1 with no surge)
	DrainTimeoutSeconds int  `json:"drainTimeoutSeconds,omitempty"`
}

// Recycle replaces a member that crawlers reported blocked on BlockedTargets distinct targets
// within WindowSeconds: its address is burned for them.
type Recycle struct {
	BlockedTargets int `json:"blockedTargets"`
	WindowSeconds  int `json:"windowSeconds,omitempty"`
	// Quarantine keeps a burned member's address from coming back (quarantine.go); with
	// recycle set it is on unless its seconds is 0.
	Quarantine *Quarantine `json:"quarantine,omitempty"`
}

// ParsePoolSpec decodes and validates a pool spec as strictly as ParseProxySpec, applies the
// defaults (the template's too) and names the offending field in its error.
func ParsePoolSpec(data []byte) (PoolSpec, error) {
	if v, ok := declaredVersion(data); ok && v != 1 {
		return PoolSpec{}, versionError(v)
	}
	// The template is a ProxySpec and gets ParseProxySpec's version rule: a newer one may use
	// fields this version does not know.
	if v, ok := declaredVersion(objectField(data, "template")); ok && v != 1 {
		return PoolSpec{}, &FieldError{Field: "template.v", Problem: versionError(v).(*FieldError).Problem}
	}
	var s PoolSpec
	err := parseAll(data, &s, func() error {
		s.applyDefaults()
		return s.Validate()
	})
	if err != nil {
		return PoolSpec{}, err
	}
	return s, nil
}

func (s *PoolSpec) applyDefaults() {
	if s.V == 0 {
		s.V = 1
	}
	s.Template.applyDefaults()
	if len(s.Placements) == 0 {
		s.Placements = nil // "placements": [] and no placements are one spec
	}
	if s.Spread == "" {
		s.Spread = SpreadRoundRobin
	}
	r := &s.Rotation
	if r.MaxSurge == nil {
		n := DefaultMaxSurge
		r.MaxSurge = &n
	}
	s.Autoscale.applyDefaults()
	if r.MinAvailable == nil && s.Replicas != nil {
		// Successor-first replacement keeps every member Ready; without a surge one member
		// must go first.
		n := *s.Replicas
		if *r.MaxSurge == 0 {
			n--
		}
		// Within bounds even when replicas is not, so that one mistake gets one error.
		n = min(max(n, 0), MaxReplicas)
		r.MinAvailable = &n
	}
	if r.DrainTimeoutSeconds == 0 {
		r.DrainTimeoutSeconds = DefaultDrainTimeoutSeconds
	}
	if s.Recycle != nil && s.Recycle.WindowSeconds == 0 {
		s.Recycle.WindowSeconds = DefaultRecycleWindow
	}
	if s.Recycle != nil {
		if s.Recycle.Quarantine == nil {
			s.Recycle.Quarantine = &Quarantine{}
		}
		s.Recycle.Quarantine.applyDefaults()
	}
}

// Validate checks a pool spec whose defaults are applied; all problems are joined, the
// template's prefixed with "template.". A spec without its defaults gets errors, not a panic.
func (s PoolSpec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if s.V != 1 {
		errs = append(errs, versionError(s.V))
	}
	if err := s.Template.Validate(); err != nil {
		for _, e := range unjoin(err) {
			var fe *FieldError
			switch {
			case !errors.As(e, &fe):
				errs = append(errs, fmt.Errorf("template: %w", e))
			case fe.Field == "pool" && s.Template.Pool != "":
				// Reported below: a template has no owner, valid name or not.
			default:
				errs = append(errs, &FieldError{Field: "template." + fe.Field, Problem: fe.Problem})
			}
		}
	}
	if s.Template.Mode == ModeExternal {
		// Any other mode but managed is already reported by the template's own checks.
		bad("template.mode", "must be %q: a pool creates its members' instances", ModeManaged)
	}
	if s.Template.Pool != "" {
		bad("template.pool", "must be empty: the pool controller sets it on each member")
	}
	if s.Template.Drain {
		bad("template.drain", "must be false: the pool controller sets it on a member it drains")
	}
	if _, ok := s.Template.Attributes[PoolAttribute]; ok {
		bad("template.attributes."+PoolAttribute, "must be left out: the pool controller sets it to the pool's name on each member")
	}
	replicas, replicasOK := 0, false
	switch {
	case s.Replicas == nil && s.Autoscale == nil:
		bad("replicas", "is required (0 to %d), unless autoscale is given", MaxReplicas)
	case s.Replicas != nil && s.Autoscale != nil:
		bad("replicas", "must be left out when autoscale is given: the autoscaler sets the member count")
	case s.Autoscale != nil:
		errs = append(errs, s.Autoscale.validate()...)
		// rotation.minAvailable is checked against the most members autoscale allows.
		if s.Autoscale.Max != nil && *s.Autoscale.Max >= 0 && *s.Autoscale.Max <= MaxReplicas {
			replicas, replicasOK = *s.Autoscale.Max, true
		}
	case *s.Replicas < 0 || *s.Replicas > MaxReplicas:
		replicas = *s.Replicas
		bad("replicas", "must be between 0 and %d, got %d", MaxReplicas, replicas)
	default:
		replicas, replicasOK = *s.Replicas, true
	}
	if len(s.Placements) > MaxPlacements {
		bad("placements", "must have at most %d entries, has %d", MaxPlacements, len(s.Placements))
	}
	seen := make(map[PoolPlacement]int, len(s.Placements))
	for i, p := range s.Placements {
		if p.Provider != "" {
			if err := ValidName(p.Provider); err != nil {
				bad(fmt.Sprintf("placements[%d].provider", i), "%v", err)
			}
		}
		// Compared as filled in from the template: {} and {"zone": "a"} under a template in
		// zone a are one place, and members spread over both would stack on it.
		place := s.Place(i)
		if j, ok := seen[place]; ok {
			bad(fmt.Sprintf("placements[%d]", i), "repeats placements[%d] (the same place once the template fills the empty fields)", j)
		} else {
			seen[place] = i
		}
	}
	if s.Spread != SpreadRoundRobin && s.Spread != SpreadLeastLoaded {
		bad("spread", "must be %q or %q, got %q", SpreadRoundRobin, SpreadLeastLoaded, s.Spread)
	}
	r := s.Rotation
	ageOK := r.MaxAgeSeconds == 0 || (r.MaxAgeSeconds >= MinRotationAge && r.MaxAgeSeconds <= MaxRotationAge)
	if !ageOK {
		bad("rotation.maxAgeSeconds", "must be 0 (never) or between %d and %d, got %d", MinRotationAge, MaxRotationAge, r.MaxAgeSeconds)
	}
	switch j := r.JitterSeconds; {
	case j < 0 || j > MaxRotationAge:
		bad("rotation.jitterSeconds", "must be between 0 and %d, got %d", MaxRotationAge, j)
	case ageOK && r.MaxAgeSeconds == 0 && j > 0:
		bad("rotation.jitterSeconds", "must be 0 when maxAgeSeconds is 0 (members never age out), got %d", j)
	case ageOK && j > 0 && j >= r.MaxAgeSeconds:
		bad("rotation.jitterSeconds", "must be below maxAgeSeconds (%d), got %d", r.MaxAgeSeconds, j)
	}
	surge := DefaultMaxSurge
	if r.MaxSurge != nil {
		surge = *r.MaxSurge
	}
	if surge < 0 || surge > MaxReplicas {
		bad("rotation.maxSurge", "must be between 0 and %d, got %d", MaxReplicas, surge)
	}
	if r.MinAvailable != nil {
		// Compared with replicas only once replicas itself is valid.
		bound := "replicas"
		if s.Autoscale != nil {
			bound = "autoscale.max"
		}
		switch m := *r.MinAvailable; {
		case replicasOK && (m < 0 || m > replicas):
			bad("rotation.minAvailable", "must be between 0 and %s (%d), got %d", bound, replicas, m)
		case m < 0 || m > MaxReplicas:
			bad("rotation.minAvailable", "must be between 0 and %d, got %d", MaxReplicas, m)
		case !replicasOK:
		case surge == 0 && replicas > 0 && m >= replicas:
			bad("rotation.minAvailable", "must be below replicas (%d) when maxSurge is 0, or no member could ever be replaced, got %d", replicas, m)
		}
	}
	if r.DrainTimeoutSeconds < 1 || r.DrainTimeoutSeconds > 86400 {
		bad("rotation.drainTimeoutSeconds", "must be between 1 and 86400, got %d", r.DrainTimeoutSeconds)
	}
	if c := s.Recycle; c != nil {
		if c.BlockedTargets < 1 || c.BlockedTargets > 1000 {
			bad("recycle.blockedTargets", "must be between 1 and 1000, got %d", c.BlockedTargets)
		}
		if c.WindowSeconds < 60 || c.WindowSeconds > 7*86400 {
			bad("recycle.windowSeconds", "must be between 60 and 604800, got %d", c.WindowSeconds)
		}
		if c.Quarantine != nil {
			c.Quarantine.problems(bad)
		}
	}
	if c := s.Leases; c != nil && c.MaxPerHolder != nil && (*c.MaxPerHolder < 0 || *c.MaxPerHolder > MaxPerHolder) {
		bad("leases.maxPerHolder", "must be between 0 and %d, got %d", MaxPerHolder, *c.MaxPerHolder)
	}
	return errors.Join(errs...)
}

// MaxMembers is the cap on the pool's members: replicas (autoscale.max) plus the surge. On a
// spec whose defaults are not applied, a missing replicas counts as 0 and a missing maxSurge
// as its default.
func (s PoolSpec) MaxMembers() int {
	n := DefaultMaxSurge
	if s.Rotation.MaxSurge != nil {
		n = *s.Rotation.MaxSurge
	}
	switch {
	case s.Replicas != nil:
		n += *s.Replicas
	case s.Autoscale != nil && s.Autoscale.Max != nil:
		n += *s.Autoscale.Max
	}
	return n
}

// PoolAttribute is the attribute the controller gives each member: pool=<pool name>.
const PoolAttribute = "pool"

// Place is where placements[i] puts a member, its empty fields filled from the template.
func (s PoolSpec) Place(i int) PoolPlacement {
	p, t := s.Placements[i], s.Template
	return PoolPlacement{
		Provider:    cmp.Or(p.Provider, t.Provider),
		Region:      cmp.Or(p.Region, t.Placement.Region),
		Zone:        cmp.Or(p.Zone, t.Placement.Zone),
		MachineType: cmp.Or(p.MachineType, t.Placement.MachineType),
		Image:       cmp.Or(p.Image, t.Placement.Image),
	}
}

// ValidPoolName checks a pool's name: a DNS-1123 label short enough that <pool>-<suffix> is one.
func ValidPoolName(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if len(name) > MaxPoolNameLen {
		return fmt.Errorf("must be at most %d characters (a member is <pool>-<%d characters>), has %d", MaxPoolNameLen, MemberSuffixLen, len(name))
	}
	return nil
}

// unjoin splits an errors.Join result into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// objectField is the raw value of key in the JSON object data, nil if there is none.
func objectField(data []byte, key string) []byte {
	var head map[string]json.RawMessage
	if json.Unmarshal(data, &head) != nil {
		return nil
	}
	return head[key]
}
