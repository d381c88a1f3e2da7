package schemas

import (
	"slices"
	"testing"
)

func TestCheckCatalog(t *testing.T) {
	cat := Catalog{
		"local": {Hosts: []string{"local"}},
		"kvm":   {Hosts: []string{"h1", "h2"}},
		"empty": {},
		"cfg":   {HostsUnknown: true}, // from a config, offline
	}
	cases := []struct {
		name, kind, doc string
		want            []string // the error, one line per field; none: accepted
	}{
		{"known", "proxy", `{"provider":"local"}`, nil},
		{"external needs none", "proxy", `{"mode":"external","endpoint":{"host":"h"}}`, nil},
		{"unknown", "proxy", `{"provider":"nope"}`, []string{`provider: unknown provider "nope" (known: cfg, empty, kvm, local)`}},
		{"zone a host", "proxy", `{"provider":"kvm","placement":{"zone":"h2"}}`, nil},
		{"zone not a host", "proxy", `{"provider":"kvm","placement":{"zone":"h3"}}`, []string{`placement.zone: "h3" is not a host of provider "kvm" (hosts: h1, h2)`}},
		{"no hosts", "proxy", `{"provider":"empty"}`, []string{`provider: "empty" has no hosts`}},
		{"hosts unknown: zone unchecked", "proxy", `{"provider":"cfg","placement":{"zone":"any"}}`, nil},
		{"pool known", "pool", `{"template":{"provider":"local"},"replicas":1}`, nil},
		{"pool unknown", "pool", `{"template":{"provider":"nope"},"replicas":1}`, []string{`template.provider: unknown provider "nope" (known: cfg, empty, kvm, local)`}},
		{"pool zone", "pool", `{"template":{"provider":"kvm","placement":{"zone":"x"}},"replicas":1}`, []string{`template.placement.zone: "x" is not a host of provider "kvm" (hosts: h1, h2)`}},
		{"placements override an unknown template provider", "pool",
			`{"template":{"provider":"nope"},"replicas":2,"placements":[{"provider":"local"},{"provider":"kvm","zone":"h1"}]}`, nil},
		{"placements name each field once", "pool",
			`{"template":{"provider":"nope"},"replicas":2,"placements":[{"zone":"a"},{"zone":"b"},{"provider":"gone"},{"provider":"kvm","zone":"h9"}]}`,
			[]string{`template.provider: unknown provider "nope" (known: cfg, empty, kvm, local)`,
				`placements[2].provider: unknown provider "gone" (known: cfg, empty, kvm, local)`,
				`placements[3].zone: "h9" is not a host of provider "kvm" (hosts: h1, h2)`}},
		{"a placement's zone on the template's provider", "pool",
			`{"template":{"provider":"kvm"},"replicas":2,"placements":[{"zone":"h1"},{"zone":"h7"}]}`,
			[]string{`placements[1].zone: "h7" is not a host of provider "kvm" (hosts: h1, h2)`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.kind == "proxy" {
				s, perr := ParseProxySpec([]byte(tc.doc))
				if perr != nil {
					t.Fatal(perr)
				}
				err = s.CheckCatalog(cat)
			} else {
				s, perr := ParsePoolSpec([]byte(tc.doc))
				if perr != nil {
					t.Fatal(perr)
				}
				err = s.CheckCatalog(cat)
			}
			var got []string
			for _, e := range leafErrors(err) {
				got = append(got, e.Error())
			}
			errorFields(t, err)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestCatalogNames(t *testing.T) {
	if got := (Catalog{}).Names(); got != "none" {
		t.Errorf("empty: %q", got)
	}
	if got := (Catalog{"b": {}, "a": {}}).Names(); got != "a, b" {
		t.Errorf("sorted: %q", got)
	}
}
