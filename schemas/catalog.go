package schemas

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Catalog is the providers proxies can be placed on, by name: what the reconciler reads from
// provider_catalog, or what a config declares. A spec that parses may still be one the
// reconciler refuses (an unknown provider, a zone that is not a host); CheckCatalog says so
// the same way for the reconciler, the pool controller and `egressd validate`.
type Catalog map[string]CatalogEntry

// CatalogEntry is one provider of a Catalog.
type CatalogEntry struct {
	Hosts []string
	// HostsUnknown says the hosts are not known (a catalog made from a config, offline), so
	// zones are not checked.
	HostsUnknown bool
	// CredentialsInPlace says the provider delivers new credentials to a running instance
	// (local); without it a credential change rolls a new instance (decision 87).
	CredentialsInPlace bool
	// MaxUnavailable is the provider's rollout budget: its proxies of their own that may be
	// draining or replaced for a rollout at once (0: the default, 1).
	MaxUnavailable int
}

// Names lists the providers, sorted, for messages: "a, b", or "none".
func (c Catalog) Names() string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// UnknownProvider is the error for a provider the catalog does not have, at field.
func (c Catalog) UnknownProvider(field, provider string) *FieldError {
	return &FieldError{Field: field, Problem: fmt.Sprintf("unknown provider %q (known: %s)", provider, c.Names())}
}

// CheckZone is the reconciler's rule for placing a proxy of provider on zone: the provider
// must have hosts, and a zone, when given, must be one of them. providerField and zoneField
// name the fields in the error.
func (c Catalog) CheckZone(providerField, zoneField, provider, zone string) error {
	e := c[provider]
	switch {
	case e.HostsUnknown:
		return nil
	case len(e.Hosts) == 0:
		return &FieldError{Field: providerField, Problem: fmt.Sprintf("%q has no hosts", provider)}
	case zone != "" && !slices.Contains(e.Hosts, zone):
		return &FieldError{Field: zoneField, Problem: fmt.Sprintf("%q is not a host of provider %q (hosts: %s)", zone, provider, strings.Join(e.Hosts, ", "))}
	}
	return nil
}

// CheckCatalog reports what the reconciler would refuse in a spec that parses: a managed
// proxy whose provider is not in c, or whose provider has no hosts or not its zone. An
// external proxy needs no provider.
func (s ProxySpec) CheckCatalog(c Catalog) error {
	if s.Mode == ModeExternal {
		return nil
	}
	return c.check(s.Provider, s.Placement.Zone, "provider", "placement.zone")
}

func (c Catalog) check(provider, zone, providerField, zoneField string) error {
	if _, ok := c[provider]; !ok {
		return c.UnknownProvider(providerField, provider)
	}
	return c.CheckZone(providerField, zoneField, provider, zone)
}

// CheckCatalog reports what the reconciler would refuse in the members of a pool spec that
// parses: each place a member may go (each placement filled in from the template, or the
// template alone) is checked as a proxy is, and the error names the field the value came
// from (placements[1].provider, or template.provider when the placement leaves it to the
// template). The template's own provider is not checked when every placement overrides it:
// no member is made with it.
func (s PoolSpec) CheckCatalog(c Catalog) error {
	if len(s.Placements) == 0 {
		return c.check(s.Template.Provider, s.Template.Placement.Zone, "template.provider", "template.placement.zone")
	}
	var errs []error
	seen := map[FieldError]bool{}
	for i, p := range s.Placements {
		place := s.Place(i)
		pf, zf := "template.provider", "template.placement.zone"
		if p.Provider != "" {
			pf = fmt.Sprintf("placements[%d].provider", i)
		}
		if p.Zone != "" {
			zf = fmt.Sprintf("placements[%d].zone", i)
		}
		err := c.check(place.Provider, place.Zone, pf, zf)
		var fe *FieldError
		if errors.As(err, &fe) && !seen[*fe] {
			// One error per field: placements that leave the provider to the template would
			// repeat the template's.
			seen[*fe] = true
			errs = append(errs, fe)
		}
	}
	return errors.Join(errs...)
}

// Unknown reports whether a provider is missing from the catalog: an error of CheckCatalog
// is then UnknownProvider rather than InvalidPlacement.
func (c Catalog) Unknown(provider string) bool {
	_, ok := c[provider]
	return !ok
}
