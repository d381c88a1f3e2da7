package config

import (
	"log/slog"
	"maps"

	"reflect"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers/local"
)

// Every registry entry builds from its own block type: a build func asserting another type
// (a copy-paste slip when adding a provider) panics here rather than at a user's first run.
// Zero blocks may be refused, but with an error.
func TestRegistryBuildsEachKind(t *testing.T) {
	for _, name := range providerTypes() {
		t.Run(name, func(t *testing.T) {
			k := providerKinds[name]
			pc := Provider{Name: "p", Type: name, Block: reflect.New(k.block).Interface()}
			b, err := Build(pc, t.TempDir(), slog.New(slog.DiscardHandler), nil)
			if err == nil && b == nil {
				t.Fatal("no Backend and no error")
			}
			if err != nil && !k.required {
				t.Fatalf("a type whose block is optional must build from its zero block: %v", err)
			}
		})
	}
}

// A provider entry decoded from YAML carries the block as the registered type, and an
// optional missing block becomes its zero value.
func TestProviderDocDecodesBlocks(t *testing.T) {
	cfg, err := Parse([]byte("providers:\n  - {name: a, type: local}\n  - name: b\n    type: local\n    local: {maxConcurrentOps: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := blockOf[local.Config](cfg.Providers[0]); got.MaxConcurrentOps != 0 {
		t.Fatalf("zero block = %+v", got)
	}
	if got := blockOf[local.Config](cfg.Providers[1]); got.MaxConcurrentOps != 3 {
		t.Fatalf("block = %+v", got)
	}
}

// The create-rate limit rides with the catalog's limits, its burst 1 unless set, and an entry
// without one adds nothing to what the provider reports.
func TestCreateRateLimits(t *testing.T) {
	cfg, err := Parse([]byte("providers:\n  - {name: a, type: local, maxCreatesPerMinute: 6, maxInstances: 9, maxLifetimeSeconds: 3600, maxUnavailable: 4}\n  - {name: b, type: local}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Providers[0].Limits(map[string]int{"instances": 40})
	want := map[string]int{"instances": 40, events.LimitCreatesPerMinute: 6, events.LimitCreateBurst: 1, events.LimitMaxInstances: 9,
		events.LimitMaxLifetimeSeconds: 3600, events.LimitMaxUnavailable: 4}
	if !maps.Equal(got, want) {
		t.Errorf("limits %v, want %v", got, want)
	}
	if got := cfg.Providers[1].Limits(nil); got != nil {
		t.Errorf("limits of an entry without a rate %v, want none", got)
	}
}
