package config

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"reflect"
	"sort"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers/gcp"
	"github.com/egressd/egressd/providers/kubernetes"
	"github.com/egressd/egressd/providers/libvirt"
	"github.com/egressd/egressd/providers/local"
	"github.com/egressd/egressd/providers/proxmox"
	"github.com/egressd/egressd/schemas"
)

// providerKinds is the one registry of provider types: adding a provider is one entry here
// (docs/provider-contract.md, "Adding a provider"). The config loader, its validation, setup
// and run all read it; nothing else in cmd/ names a concrete provider package.
var providerKinds = map[string]providerKind{
	"local": {
		block: reflect.TypeFor[local.Config](),
		build: buildLocal,
	},
	"libvirt": {
		block:    reflect.TypeFor[libvirt.Config](),
		required: true,
		build: func(pc Provider, env buildEnv) (Backend, error) {
			var h libvirt.Hooks
			if env.hooks != nil {
				h = libvirt.Hooks{Lock: env.hooks.Lock, Progress: func(ev libvirt.ProgressEvent) {
					env.hooks.Progress(Progress{Provider: ev.Provider, Host: ev.Host, Image: ev.Image, Phase: ev.Phase, Done: ev.Done, Total: ev.Total})
				}}
			}
			return libvirt.New(pc.Name, *blockOf[libvirt.Config](pc), env.log, h)
		},
	},
	"gcp": {
		block:    reflect.TypeFor[gcp.Config](),
		required: true,
		build: func(pc Provider, env buildEnv) (Backend, error) {
			return gcp.New(pc.Name, *blockOf[gcp.Config](pc), env.log)
		},
	},
	"kubernetes": {
		block:    reflect.TypeFor[kubernetes.Config](),
		required: true,
		build: func(pc Provider, env buildEnv) (Backend, error) {
			return kubernetes.New(pc.Name, *blockOf[kubernetes.Config](pc), env.log)
		},
	},
	"proxmox": {
		block:    reflect.TypeFor[proxmox.Config](),
		required: true,
		build: func(pc Provider, env buildEnv) (Backend, error) {
			return proxmox.New(pc.Name, *blockOf[proxmox.Config](pc), env.log)
		},
	},
}

// providerKind is one provider type: the Go type of its config block (the YAML key is the
// type's name) and how to build it from that block.
type providerKind struct {
	block reflect.Type
	// required means the block must be present; otherwise a missing block is its zero value.
	required bool
	build    func(pc Provider, env buildEnv) (Backend, error)
}

// buildEnv is what a provider may be built with beyond its own block. hooks is nil when only
// this process is concerned (setup), so a provider must accept nil hooks.
type buildEnv struct {
	dataDir string
	log     *slog.Logger
	hooks   *Hooks
}

// Hooks are the NATS-backed services the daemon hands providers through their own hook
// types (cmd/egressd/hooks.go): a lock shared by every process, and progress events.
type Hooks struct {
	// Lock blocks until this process holds key (or ctx ends), and keeps it until release.
	Lock func(ctx context.Context, key string) (release func(), err error)
	// Progress publishes a long task's progress; it must not block.
	Progress func(Progress)
}

// Progress is a long provider task's progress (an image download or upload).
type Progress struct {
	Provider, Host, Image, Phase string
	Done, Total                  int64
}

// blockOf returns pc's block as the type its kind declares. It panics on a mismatch, which
// only a registry entry naming the wrong type can cause (TestRegistryBuildsEachKind builds each).
func blockOf[T any](pc Provider) *T {
	return pc.Block.(*T)
}

// providerTypes lists the registered types, sorted, for error messages and docs.
func providerTypes() []string {
	names := make([]string, 0, len(providerKinds))
	for n := range providerKinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// buildLocal builds a local provider from its block; a state directory left out is one of
// its own under the data directory.
func buildLocal(pc Provider, env buildEnv) (Backend, error) {
	lc := *blockOf[local.Config](pc)
	if lc.StateDir == "" {
		lc.StateDir = filepath.Join(env.dataDir, "local", pc.Name)
	}
	abs, err := filepath.Abs(lc.StateDir)
	if err != nil {
		return nil, err
	}
	lc.StateDir = abs
	return local.New(pc.Name, lc, env.log)
}

// Build builds pc through its registry entry.
func Build(pc Provider, dataDir string, log *slog.Logger, hooks *Hooks) (Backend, error) {
	k, ok := providerKinds[pc.Type]
	if !ok {
		return nil, fmt.Errorf("provider %s: unknown type %q (one of %v)", pc.Name, pc.Type, providerTypes())
	}
	if pc.Block == nil {
		pc.Block = reflect.New(k.block).Interface()
	}
	return k.build(pc, buildEnv{dataDir: dataDir, log: log, hooks: hooks})
}

// providerDoc is the YAML shape of one provider entry, built from the registry: name, type,
// and one optional field per registered type whose key is the type's name. Decoding into it
// keeps the loader strict (an unknown key anywhere is an error naming it and its line)
// without a hand-kept field per type.
var providerDoc, providerDocKinds = func() (reflect.Type, []string) {
	kinds := providerTypes()
	fields := []reflect.StructField{
		{Name: "Name", Type: reflect.TypeFor[string](), Tag: `yaml:"name"`},
		{Name: "Type", Type: reflect.TypeFor[string](), Tag: `yaml:"type"`},
		{Name: "MaxCreatesPerMinute", Type: reflect.TypeFor[int](), Tag: `yaml:"maxCreatesPerMinute"`},
		{Name: "CreateBurst", Type: reflect.TypeFor[int](), Tag: `yaml:"createBurst"`},
		{Name: "MaxInstances", Type: reflect.TypeFor[int](), Tag: `yaml:"maxInstances"`},
		{Name: "MaxInstancesPerTarget", Type: reflect.TypeFor[int](), Tag: `yaml:"maxInstancesPerTarget"`},
		{Name: "MaxLifetimeSeconds", Type: reflect.TypeFor[int](), Tag: `yaml:"maxLifetimeSeconds"`},
		{Name: "MaxUnavailable", Type: reflect.TypeFor[int](), Tag: `yaml:"maxUnavailable"`},
	}
	for i, k := range kinds {
		fields = append(fields, reflect.StructField{
			Name: fmt.Sprintf("Block%d", i),
			Type: reflect.PointerTo(providerKinds[k].block),
			Tag:  reflect.StructTag(fmt.Sprintf(`yaml:%q`, k)),
		})
	}
	return reflect.StructOf(fields), kinds
}()

// providerFromDoc turns one decoded providerDoc into a Provider. Blocks keyed by a type
// other than the entry's are kept in Others, for validation to name.
func providerFromDoc(v reflect.Value) Provider {
	pc := Provider{Name: v.Field(0).String(), Type: v.Field(1).String(),
		MaxCreatesPerMinute: int(v.Field(2).Int()), CreateBurst: int(v.Field(3).Int()),
		MaxInstances: int(v.Field(4).Int()), MaxInstancesPerTarget: int(v.Field(5).Int()),
		MaxLifetimeSeconds: int(v.Field(6).Int()), MaxUnavailable: int(v.Field(7).Int())}
	for i, k := range providerDocKinds {
		f := v.Field(8 + i)
		if f.IsNil() {
			continue
		}
		if k == pc.Type {
			pc.Block = f.Interface()
		} else {
			pc.Others = append(pc.Others, k)
		}
	}
	return pc
}

// validateKind checks pc's type and blocks against the registry and fills an optional
// missing block with its zero value.
func (pc *Provider) validateKind(at string) []error {
	var errs []error
	if len(pc.Others) > 0 {
		errs = append(errs, fmt.Errorf("%s: a block of another type is set (%v; type is %q)", at, pc.Others, pc.Type))
	}
	errs = append(errs, pc.validateRate(at)...)
	k, ok := providerKinds[pc.Type]
	switch {
	case pc.Type == "":
		errs = append(errs, fmt.Errorf("%s.type: is required (one of %v)", at, providerTypes()))
	case !ok:
		errs = append(errs, fmt.Errorf("%s.type: unknown provider type %q (one of %v)", at, pc.Type, providerTypes()))
	case pc.Block == nil && k.required:
		errs = append(errs, fmt.Errorf("%s.%s: is required for type %s", at, pc.Type, pc.Type))
	case pc.Block == nil:
		pc.Block = reflect.New(k.block).Interface()
	}
	return errs
}

// maxLimitValue bounds every limit of a provider entry (rates, bursts, instances): a bound
// above it is no bound.
const maxLimitValue = 100000

// validateRate checks the create-rate limit and fills the default burst (1).
func (pc *Provider) validateRate(at string) []error {
	var errs []error
	if pc.MaxCreatesPerMinute < 0 || pc.MaxCreatesPerMinute > maxLimitValue {
		errs = append(errs, fmt.Errorf("%s.maxCreatesPerMinute: must be between 0 (no limit) and %d, got %d", at, maxLimitValue, pc.MaxCreatesPerMinute))
	}
	switch {
	case pc.CreateBurst < 0 || pc.CreateBurst > maxLimitValue:
		errs = append(errs, fmt.Errorf("%s.createBurst: must be between 1 and %d, got %d", at, maxLimitValue, pc.CreateBurst))
	case pc.CreateBurst > 0 && pc.MaxCreatesPerMinute == 0:
		errs = append(errs, fmt.Errorf("%s.createBurst: needs maxCreatesPerMinute: it is how many of a minute's creates may go at once", at))
	case pc.CreateBurst == 0 && pc.MaxCreatesPerMinute > 0:
		pc.CreateBurst = 1
	}
	for _, f := range []struct {
		key string
		v   int
	}{{"maxInstances", pc.MaxInstances}, {"maxInstancesPerTarget", pc.MaxInstancesPerTarget}, {"maxUnavailable", pc.MaxUnavailable}} {
		if f.v < 0 || f.v > maxLimitValue {
			errs = append(errs, fmt.Errorf("%s.%s: must be between 0 (no limit) and %d, got %d", at, f.key, maxLimitValue, f.v))
		}
	}
	if l := pc.MaxLifetimeSeconds; l != 0 && (l < schemas.MinLifetimeSeconds || l > schemas.MaxLifetimeSeconds) {
		// The bounds of a spec's maxLifetimeSeconds: the default is one a spec could say.
		errs = append(errs, fmt.Errorf("%s.maxLifetimeSeconds: must be 0 (none) or between %d and %d, got %d", at, schemas.MinLifetimeSeconds, schemas.MaxLifetimeSeconds, l))
	}
	return errs
}

// Limits are the provider's limits as its catalog record carries them to the reconciler
// (events.CatalogRecord.Limits), merged over what the provider itself reports.
func (pc Provider) Limits(fromProvider map[string]int) map[string]int {
	out := maps.Clone(fromProvider)
	set := func(k string, v int) {
		if v > 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[k] = v
		}
	}
	if pc.MaxCreatesPerMinute > 0 {
		set(events.LimitCreatesPerMinute, pc.MaxCreatesPerMinute)
		set(events.LimitCreateBurst, pc.CreateBurst)
	}
	set(events.LimitMaxInstances, pc.MaxInstances)
	set(events.LimitMaxPerTarget, pc.MaxInstancesPerTarget)
	set(events.LimitMaxLifetimeSeconds, pc.MaxLifetimeSeconds)
	set(events.LimitMaxUnavailable, pc.MaxUnavailable)
	return out
}
