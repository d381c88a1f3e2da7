package schemas

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParsePoolSpecCases(t *testing.T) {
	for _, tc := range poolCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePoolSpec([]byte(tc.doc))
			if got := errorFields(t, err); !slices.Equal(got, tc.fields) {
				t.Errorf("fields named: %q, want %q; error: %v", got, tc.fields, err)
			}
		})
	}
}

func intp(n int) *int { return &n }

func TestParsePoolSpecDefaults(t *testing.T) {
	template := ProxySpec{V: 1, Mode: ModeManaged, Provider: "p", Port: 3128, MaxLeases: intp(1),
		HealthCheck: HealthCheck{IntervalSeconds: 30, TimeoutSeconds: 5, FailureThreshold: 3, SuccessThreshold: 1, RequireAnonymity: AnonymityNone}}
	tests := []struct {
		name string
		doc  string
		want PoolSpec
	}{
		{
			name: "minimal",
			doc:  `{"template":{"provider":"p"},"replicas":3}`,
			want: PoolSpec{V: 1, Template: template, Replicas: intp(3), Spread: SpreadRoundRobin,
				Rotation: Rotation{MaxSurge: intp(1), MinAvailable: intp(3), DrainTimeoutSeconds: 900}},
		},
		{
			name: "without a surge one member may be down",
			doc:  `{"template":{"provider":"p"},"replicas":3,"rotation":{"maxSurge":0}}`,
			want: PoolSpec{V: 1, Template: template, Replicas: intp(3), Spread: SpreadRoundRobin,
				Rotation: Rotation{MaxSurge: intp(0), MinAvailable: intp(2), DrainTimeoutSeconds: 900}},
		},
		{
			name: "no replicas and no surge",
			doc:  `{"template":{"provider":"p"},"replicas":0,"rotation":{"maxSurge":0}}`,
			want: PoolSpec{V: 1, Template: template, Replicas: intp(0), Spread: SpreadRoundRobin,
				Rotation: Rotation{MaxSurge: intp(0), MinAvailable: intp(0), DrainTimeoutSeconds: 900}},
		},
		{
			name: "explicit values are kept",
			doc: `{"template":{"provider":"p"},"replicas":3,"spread":"least-loaded","placements":[{"zone":"a"}],
				"rotation":{"maxAgeSeconds":600,"jitterSeconds":60,"maxSurge":2,"minAvailable":1,"drainTimeoutSeconds":30},
				"recycle":{"blockedTargets":4,"windowSeconds":120,"quarantine":{"seconds":600,"ipv4Prefix":24,"ipv6Prefix":64,"maxReplacements":0}}}`,
			want: PoolSpec{V: 1, Template: template, Replicas: intp(3), Spread: SpreadLeastLoaded, Placements: []PoolPlacement{{Zone: "a"}},
				Rotation: Rotation{MaxAgeSeconds: 600, JitterSeconds: 60, MaxSurge: intp(2), MinAvailable: intp(1), DrainTimeoutSeconds: 30},
				Recycle: &Recycle{BlockedTargets: 4, WindowSeconds: 120,
					Quarantine: &Quarantine{Seconds: intp(600), IPv4Prefix: 24, IPv6Prefix: 64, MaxReplacements: intp(0)}}},
		},
		{
			name: "recycle window, empty placements and attributes",
			doc:  `{"template":{"provider":"p","attributes":{}},"replicas":1,"placements":[],"spread":"","recycle":{"blockedTargets":2}}`,
			want: PoolSpec{V: 1, Template: template, Replicas: intp(1), Spread: SpreadRoundRobin,
				Rotation: Rotation{MaxSurge: intp(1), MinAvailable: intp(1), DrainTimeoutSeconds: 900},
				Recycle: &Recycle{BlockedTargets: 2, WindowSeconds: 3600, Quarantine: &Quarantine{Seconds: intp(DefaultQuarantineSeconds),
					IPv4Prefix: DefaultQuarantineIPv4Prefix, IPv6Prefix: DefaultQuarantineIPv6Prefix, MaxReplacements: intp(DefaultQuarantineReplacements)}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePoolSpec([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestPoolPlace(t *testing.T) {
	s, err := ParsePoolSpec([]byte(`{"template":{"provider":"p","placement":{"region":"eu","zone":"a","machineType":"m","image":"i"}},
		"replicas":2,"placements":[{},{"zone":"b"},{"provider":"q","image":"j"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []PoolPlacement{
		{Provider: "p", Region: "eu", Zone: "a", MachineType: "m", Image: "i"},
		{Provider: "p", Region: "eu", Zone: "b", MachineType: "m", Image: "i"},
		{Provider: "q", Region: "eu", Zone: "a", MachineType: "m", Image: "j"},
	}
	for i, w := range want {
		if got := s.Place(i); got != w {
			t.Errorf("Place(%d) = %+v, want %+v", i, got, w)
		}
	}
}

func TestPoolMaxMembers(t *testing.T) {
	tests := []struct {
		name string
		spec PoolSpec
		want int
	}{
		{"replicas plus surge", PoolSpec{Replicas: intp(10), Rotation: Rotation{MaxSurge: intp(3)}}, 13},
		{"no surge", PoolSpec{Replicas: intp(10), Rotation: Rotation{MaxSurge: intp(0)}}, 10},
		{"defaults not applied", PoolSpec{Replicas: intp(10)}, 10 + DefaultMaxSurge},
		{"nothing set", PoolSpec{}, DefaultMaxSurge},
	}
	for _, tc := range tests {
		if got := tc.spec.MaxMembers(); got != tc.want {
			t.Errorf("%s: MaxMembers = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Validate is exported, so it may meet a spec ParsePoolSpec never filled in.
func TestPoolValidateWithoutDefaults(t *testing.T) {
	err := PoolSpec{}.Validate()
	if got := errorFields(t, err); !slices.Contains(got, "replicas") {
		t.Errorf("fields named: %q, want replicas among them", got)
	}
}

func TestPoolErrorsNeverQuoteSecrets(t *testing.T) {
	const pw, ud = "PW-SENTINEL-7f3a", "UD-SENTINEL-9b2c"
	auth := `"auth":{"username":"u","password":"` + pw + `"}`
	docs := []string{
		`{"template":{"provider":"P",` + auth + `,"cloudInit":"` + ud + `"},"replicas":-1}`,
		`{"template":{"provider":"p",` + auth + `,"bogus":1},"replicas":1}`,
		`{"template":{"provider":"p","auth":{"username":"u","password":"` + pw + `","password":"` + pw + `"}},"replicas":1}`,
		`{"template":{"provider":"p","auth":{"username":"u","password":987654321987}},"replicas":1}`,
		`{"template":{"provider":"p","auth":{"username":"u","password":"` + pw + `\x"}},"replicas":1}`,
		`{"template":{"provider":"p","auth":{"username":"u","password":"` + pw,
		`{"template":{"provider":"p",` + auth + `},"replicas":1} trailing`,
		`{"template":{"provider":"p",` + auth + `,"pool":"x","drain":true,"mode":"external"},"replicas":1}`,
		`{"template":{"provider":"p","cloudInitRef":"#cloud-config\n` + ud + `"},"replicas":1}`,
		`{"template":{"provider":"p","cloudInit":"` + ud + `","cloudInitRef":"x"},"replicas":1}`,
		`{"template":{"v":2,` + auth + `},"replicas":1}`,
		`{"v":2,"template":{` + auth + `}}`,
		`{"template":{"provider":"p",` + auth + `},"replicas":1,"placements":[{"zone":"` + pw + `"},{"zone":"` + pw + `"}]}`,
		`{"template":{"provider":"p",` + auth + `},"replicas":1,"placements":[{"zone":987654321987}]}`,
	}
	for _, doc := range docs {
		_, err := ParsePoolSpec([]byte(doc))
		if err == nil {
			t.Errorf("%s: parsed, want an error", doc)
			continue
		}
		for _, secret := range []string{pw, ud, "987654321987", "7f3a"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q quotes %q", err, secret)
			}
		}
	}
}

func TestValidPoolName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"de-fleet", true},
		{strings.Repeat("a", MaxPoolNameLen), true},
		{strings.Repeat("a", MaxPoolNameLen+1), false},
		{"", false},
		{"De", false},
		{"a_b", false},
		{"-a", false},
	}
	for _, tc := range tests {
		if err := ValidPoolName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidPoolName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if MaxPoolNameLen != 57 {
		t.Errorf("MaxPoolNameLen = %d; proxyspec.v1.json says 57 for pool", MaxPoolNameLen)
	}
}
