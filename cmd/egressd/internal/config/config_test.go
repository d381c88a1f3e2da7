package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/workers/leaser"
)

func TestParseConfig(t *testing.T) {
	cases := []struct {
		name, in, wantErr string
	}{
		{"minimal", "providers:\n  - name: local\n    type: local\n", ""},
		{"full local block", "version: 1\nproviders:\n  - name: home\n    type: local\n    local:\n      stateDir: /tmp/x\n      addresses: [127.0.0.2-127.0.0.9]\n      bindSource: false\n      maxConcurrentOps: 4\n", ""},
		{"unknown top-level key", "provider: []\n", "field provider not found"},
		// The registry's reflect-built shapes are named as the types they stand for, not
		// spelt out field by field (docs/configuration.md quotes this message).
		{"unknown top-level key names the file's type", "provider: []\n", "line 1: field provider not found in type main.fileConfig"},
		{"unknown key of a provider entry names its type", "providers:\n  - name: local\n    type: local\n    lokal: {}\n", "line 4: field lokal not found in type main.providerConfig"},
		{"a provider list of the wrong kind names its type", "providers: 5\n", "into []main.providerConfig"},
		// The local block is providers/local.Config, registered like every other provider's;
		// its fields for tests and embedders are not config keys.
		{"local's binary is not a config key", "providers:\n  - name: local\n    type: local\n    local:\n      binary: /bin/sh\n", "line 5: field binary not found in type local.Config"},
		{"unknown nested key names it and its line", "providers:\n  - name: local\n    type: local\n    local:\n      stateDirr: /x\n", "line 5: field stateDirr not found"},
		{"bad provider name", "providers:\n  - name: Local_1\n    type: local\n", "providers[0].name:"},
		{"duplicate name", "providers:\n  - {name: a, type: local}\n  - {name: a, type: local}\n", "providers[1].name: duplicate"},
		{"unknown type", "providers:\n  - {name: a, type: vmware}\n", `providers[0].type: unknown provider type "vmware"`},
		{"block of another type", "providers:\n  - name: a\n    type: local\n    libvirt: {}\n", `providers[0]: a block of another type is set ([libvirt]; type is "local")`},
		{"required block missing", "providers:\n  - {name: a, type: libvirt}\n", "providers[0].libvirt: is required for type libvirt"},
		{"unknown key in a registered block", "providers:\n  - name: a\n    type: libvirt\n    libvirt:\n      hostz: []\n", "line 5: field hostz not found"},
		{"bad duration names its key and line", "providers:\n  - name: v\n    type: libvirt\n    libvirt:\n      budgets:\n        rpc: 5x\n", `line 6: providers[0].libvirt.budgets.rpc: "5x" is not a duration`},
		{"bad duration in a list entry", "providers:\n  - {name: a, type: local}\n  - name: g\n    type: gcp\n    gcp:\n      project: p\n      budgets: {call: soon}\n", `line 7: providers[1].gcp.budgets.call: "soon" is not a duration`},
		{"missing type", "providers:\n  - {name: a}\n", "providers[0].type: is required"},
		{"no providers key: the default local provider", "version: 1\n", ""},
		{"only the lease HTTP face's entry", "leaseHTTP:\n  crawlers:\n    - {name: scrapy, tokenSHA256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n", ""},
		{"an empty provider list", "providers: []\n", "providers: at least one"},
		{"bad version", "version: 2\nproviders:\n  - {name: a, type: local}\n", "version: unsupported"},
		{"wrong type", "providers:\n  - name: a\n    type: local\n    local:\n      maxConcurrentOps: many\n", "line 5"},
		{"empty", "", "empty config"},
		{"a create-rate limit", "providers:\n  - {name: a, type: local, maxCreatesPerMinute: 6, createBurst: 2}\n", ""},
		{"a negative create rate", "providers:\n  - {name: a, type: local, maxCreatesPerMinute: -1}\n", "providers[0].maxCreatesPerMinute: must be between 0"},
		{"instance limits", "providers:\n  - {name: a, type: local, maxInstances: 3, maxInstancesPerTarget: 2}\n", ""},
		{"a negative instance limit", "providers:\n  - {name: a, type: local, maxInstances: -3}\n", "providers[0].maxInstances: must be between 0"},
		{"a rollout budget", "providers:\n  - {name: a, type: local, maxUnavailable: 5}\n", ""},
		{"a negative rollout budget", "providers:\n  - {name: a, type: local, maxUnavailable: -1}\n", "providers[0].maxUnavailable: must be between 0"},
		{"a rollout budget as a share", "providers:\n  - {name: a, type: local, maxUnavailable: 25%}\n", "line 2"},
		{"a provider's lifetime", "providers:\n  - {name: a, type: local, maxLifetimeSeconds: 86400}\n", ""},
		{"a lifetime too short", "providers:\n  - {name: a, type: local, maxLifetimeSeconds: 5}\n", "providers[0].maxLifetimeSeconds: must be 0 (none) or between 10"},
		{"a lifetime as a duration", "providers:\n  - {name: a, type: local, maxLifetimeSeconds: 1h}\n", "line 2"},
		{"a burst without a rate", "providers:\n  - {name: a, type: local, createBurst: 2}\n", "providers[0].createBurst: needs maxCreatesPerMinute"},
		{"lease HTTP crawlers", "providers:\n  - {name: a, type: local}\nleaseHTTP:\n  crawlers:\n    - {name: scrapy, tokenSHA256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n    - {name: crawlee, tokenSHA256: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb}\n", ""},
		{"lease HTTP without crawlers", "providers:\n  - {name: a, type: local}\nleaseHTTP: {crawlers: []}\n", "leaseHTTP.crawlers: at least one"},
		{"lease HTTP hash not hex", "providers:\n  - {name: a, type: local}\nleaseHTTP:\n  crawlers:\n    - {name: s, tokenSHA256: my-token}\n", "leaseHTTP.crawlers[0].tokenSHA256: must be 64 hex digits"},
		{"lease HTTP duplicate crawler", "providers:\n  - {name: a, type: local}\nleaseHTTP:\n  crawlers:\n    - {name: s, tokenSHA256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n    - {name: s, tokenSHA256: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb}\n", "leaseHTTP.crawlers[1].name: duplicate"},
		{"lease HTTP same token twice", "providers:\n  - {name: a, type: local}\nleaseHTTP:\n  crawlers:\n    - {name: s, tokenSHA256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n    - {name: t, tokenSHA256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n", "leaseHTTP.crawlers[1].tokenSHA256: the same token"},
		{"lease HTTP crawler without name", "providers:\n  - {name: a, type: local}\nleaseHTTP:\n  crawlers:\n    - {tokenSHA256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n", "leaseHTTP.crawlers[0].name: is required"},
		{"holder cap", "providers:\n  - {name: a, type: local}\nleases:\n  maxPerHolder: 4\n", ""},
		{"holder cap negative", "providers:\n  - {name: a, type: local}\nleases:\n  maxPerHolder: -1\n", "leases.maxPerHolder: must be between 0"},
		{"holder cap too high", "providers:\n  - {name: a, type: local}\nleases:\n  maxPerHolder: 10001\n", "leases.maxPerHolder: must be between 0"},
		{"max wait", "providers:\n  - {name: a, type: local}\nleases:\n  maxWaitSeconds: 30\n", ""},
		{"max wait off", "providers:\n  - {name: a, type: local}\nleases:\n  maxWaitSeconds: 0\n", ""},
		{"max wait too long", "providers:\n  - {name: a, type: local}\nleases:\n  maxWaitSeconds: 101\n", "leases.maxWaitSeconds: must be between 0"},
		{"max wait negative", "providers:\n  - {name: a, type: local}\nleases:\n  maxWaitSeconds: -1\n", "leases.maxWaitSeconds: must be between 0"},
		{"escalation factor below 1", "providers:\n  - {name: a, type: local}\nleases:\n  cooldowns: {factor: 0.5}\n", "leases.cooldowns.factor: must be between 1"},
		{"escalation cap too long", "providers:\n  - {name: a, type: local}\nleases:\n  cooldowns: {factor: 2, max: 2d}\n", "leases.cooldowns.max: must be whole seconds"},
		{"escalation memory too short", "providers:\n  - {name: a, type: local}\nleases:\n  cooldowns: {factor: 2, memory: 500ms}\n", "leases.cooldowns.memory: must be whole seconds"},
		{"neighbours prefix too long", "providers:\n  - {name: a, type: local}\nleases:\n  neighbours: {ipv4Prefix: 33}\n", "leases.neighbours.ipv4Prefix: must be between 0"},
		{"neighbours both ways", "providers:\n  - {name: a, type: local}\nleases:\n  neighbours: {ipv4Prefix: 24, byTarget: true}\n", "leases.neighbours.byTarget: a neighbourhood is either"},
		{"neighbours empty", "providers:\n  - {name: a, type: local}\nleases:\n  neighbours: {cooldownSeconds: 60}\n", "leases.neighbours: set ipv4Prefix"},
		{"pace too long", "providers:\n  - {name: a, type: local}\nleases:\n  paceSeconds: 3601\n", "leases.paceSeconds: must be between 0"},
		{"escalation unknown key", "providers:\n  - {name: a, type: local}\nleases:\n  cooldowns: {factr: 2}\n", "factr"},
		{"explore above 1", "providers:\n  - {name: a, type: local}\nleases:\n  bestForTarget: {explore: 1.5}\n", "leases.bestForTarget.explore: must be a share between 0 and 1"},
		{"explore negative", "providers:\n  - {name: a, type: local}\nleases:\n  bestForTarget: {explore: -0.1}\n", "leases.bestForTarget.explore"},
		{"half-life fractional", "providers:\n  - {name: a, type: local}\nleases:\n  bestForTarget: {halfLife: 1500ms}\n", "leases.bestForTarget.halfLife: must be whole seconds"},
		{"best-for-target unknown key", "providers:\n  - {name: a, type: local}\nleases:\n  bestForTarget: {explor: 0.2}\n", "explor"},
		{"tier blocks negative", "providers:\n  - {name: a, type: local}\nleases:\n  tiers: {blocks: -1}\n", "leases.tiers.blocks: must be between 1"},
		{"tier quiet too long", "providers:\n  - {name: a, type: local}\nleases:\n  tiers: {quiet: 31d}\n", "leases.tiers.quiet: must be whole seconds"},
		{"tier memory below quiet", "providers:\n  - {name: a, type: local}\nleases:\n  tiers: {quiet: 2h, memory: 1h}\n", "leases.tiers.memory: must be whole seconds between the quiet period"},
		{"tiers unknown key", "providers:\n  - {name: a, type: local}\nleases:\n  tiers: {quite: 1h}\n", "quite"},
		{"max wait not a number", "providers:\n  - {name: a, type: local}\nleases:\n  maxWaitSeconds: soon\n", "line 4: cannot unmarshal"},
		{"demand window", "providers:\n  - {name: a, type: local}\nleases:\n  demandWindow: 10s\n", ""},
		{"demand window too long", "providers:\n  - {name: a, type: local}\nleases:\n  demandWindow: 2h\n", "leases.demandWindow: must be whole seconds"},
		{"demand window fraction", "providers:\n  - {name: a, type: local}\nleases:\n  demandWindow: 1500ms\n", "leases.demandWindow: must be whole seconds"},
		{"leases unknown key", "providers:\n  - {name: a, type: local}\nleases:\n  maxPerHoldr: 4\n", "field maxPerHoldr not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.in))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if len(cfg.Providers) == 0 {
					t.Fatal("a valid config without providers")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestDefaultConfigIsValid(t *testing.T) {
	c := Default()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.Providers[0].Name != "local" || c.Providers[0].Type != "local" {
		t.Fatalf("default = %+v", c.Providers)
	}
}

// The sample configs in deploy/ parse with the real loader, so they cannot drift. Each is
// named for the type it shows (deploy/<type>.example.yaml) and must declare one of that type.
func TestSampleConfigsParse(t *testing.T) {
	paths, err := filepath.Glob("../../../../deploy/*.example.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no sample configs: %v", err)
	}
	for _, p := range paths {
		typ := strings.TrimSuffix(filepath.Base(p), ".example.yaml")
		cfg, err := Load(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		found := false
		for _, pc := range cfg.Providers {
			found = found || pc.Type == typ && pc.Block != nil
		}
		if !found {
			t.Fatalf("%s declares no %s provider: %+v", p, typ, cfg.Providers)
		}
	}
}

// The config file is outside input: whatever it holds, the loader returns a config or an
// error, never a panic (the registry's reflect-built shape included), and a config it accepts
// has every provider's block set to its registered type.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("providers:\n  - {name: a, type: local}\n"))
	f.Add([]byte("providers:\n  - name: a\n    type: local\n    libvirt: {}\n"))
	f.Add([]byte("providers:\n  - name: v\n    type: libvirt\n    libvirt:\n      hosts: [{name: h, uri: 'qemu+ssh://x/system'}]\n"))
	f.Add([]byte("version: 1\nproviders: []\nleases: {maxPerHolder: 2}\n"))
	f.Add([]byte("providers: []\nleases: {bestForTarget: {explore: 0.2, halfLife: 30m}, tiers: {blocks: 2, quiet: 10m, memory: 1d}}\n"))
	f.Add([]byte("providers:\n  - name: g\n    type: gcp\n    gcp: {project: p-123456, zones: [{name: us-east1-b}], budgets: {call: 5s}}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse(b)
		if err != nil {
			return
		}
		for _, pc := range cfg.Providers {
			k, ok := providerKinds[pc.Type]
			if !ok || reflect.TypeOf(pc.Block) != reflect.PointerTo(k.block) {
				t.Fatalf("accepted provider %q with block %T", pc.Type, pc.Block)
			}
		}
	})
}

// leases.cooldowns as the leaser gets it.
func TestEscalation(t *testing.T) {
	cfg, err := Parse([]byte("providers:\n  - {name: a, type: local}\nleases:\n  cooldowns: {factor: 2, max: 6h, memory: 2d}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e := cfg.Escalation(); e.Factor != 2 || e.Cap != 6*time.Hour || e.Memory != 48*time.Hour {
		t.Fatalf("escalation %+v", e)
	}
}

// leases.bestForTarget and leases.tiers as the leaser gets them; unset, the leaser's defaults.
func TestLearningAndTiers(t *testing.T) {
	cfg, err := Parse([]byte("providers:\n  - {name: a, type: local}\nleases:\n  bestForTarget: {explore: 0, halfLife: 2h}\n  tiers: {blocks: 2, quiet: 15m, memory: 2d}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.BestForTarget(); b.Explore == nil || *b.Explore != 0 || b.HalfLife != 2*time.Hour {
		t.Fatalf("best-for-target %+v", b)
	}
	if tr := cfg.Tiers(); tr.Blocks != 2 || tr.Quiet != 15*time.Minute || tr.Memory != 48*time.Hour {
		t.Fatalf("tiers %+v", tr)
	}
	cfg, err = Parse([]byte("providers:\n  - {name: a, type: local}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if b, tr := cfg.BestForTarget(), cfg.Tiers(); b != (leaser.BestForTarget{}) || tr != (leaser.Tiers{}) {
		t.Fatalf("unset: %+v %+v", b, tr)
	}
}

// leases.maxWaitSeconds as the leaser gets it: the default when unset, off at 0.
func TestMaxWait(t *testing.T) {
	for yaml, want := range map[string]time.Duration{
		"":                                leaser.DefaultMaxWait,
		"leases:\n  maxWaitSeconds: 0\n":  leaser.WaitsOff,
		"leases:\n  maxWaitSeconds: 30\n": 30 * time.Second,
		"leases:\n  maxPerHolder: 2\n":    leaser.DefaultMaxWait,
	} {
		cfg, err := Parse([]byte("providers:\n  - {name: a, type: local}\n" + yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.MaxWait(); got != want {
			t.Errorf("%q: MaxWait %v, want %v", yaml, got, want)
		}
	}
}
