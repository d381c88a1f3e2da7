package config

import (
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

func TestEventsConfig(t *testing.T) {
	const head = "providers:\n  - {name: a, type: local}\n"
	cases := []struct {
		name, in string
		want     kvstore.EventLimits
		wantErr  string
	}{
		{"absent", "", kvstore.EventLimits{}, ""},
		{"every key", "events:\n  lifecycle: {maxAge: 90d, maxBytes: 2GiB}\n  leases: {maxAge: 6h, maxBytes: 512MiB}\n",
			kvstore.EventLimits{Lifecycle: kvstore.StreamLimits{MaxAge: 90 * 24 * time.Hour, MaxBytes: 2 << 30},
				Leases: kvstore.StreamLimits{MaxAge: 6 * time.Hour, MaxBytes: 512 << 20}}, ""},
		{"some keys, plain bytes", "events:\n  leases:\n    maxBytes: 1048576\n",
			kvstore.EventLimits{Leases: kvstore.StreamLimits{MaxBytes: 1 << 20}}, ""},
		{"unknown key", "events:\n  lease: {maxAge: 1h}\n", kvstore.EventLimits{}, "field lease not found"},
		{"bad duration", "events:\n  leases: {maxAge: soon}\n", kvstore.EventLimits{}, `line 4: duration "soon"`},
		{"negative days", "events:\n  leases: {maxAge: -1d}\n", kvstore.EventLimits{}, `duration "-1d"`},
		{"bad size", "events:\n  lifecycle: {maxBytes: 1GB}\n", kvstore.EventLimits{}, `line 4: size "1GB"`},
		{"too short", "events:\n  leases: {maxAge: 30s}\n", kvstore.EventLimits{}, "events.leases.maxAge: must be at least 2m0s"},
		{"too small", "events:\n  lifecycle: {maxBytes: 1KiB}\n", kvstore.EventLimits{}, "events.lifecycle.maxBytes: must be at least"},
		{"stats limits", "events:\n  stats: {maxAge: 7d, maxBytes: 1GiB, interval: 10s}\n  leases: {raw: all}\n",
			kvstore.EventLimits{Stats: kvstore.StreamLimits{MaxAge: 7 * 24 * time.Hour, MaxBytes: 1 << 30}}, ""},
		{"stats too small", "events:\n  stats: {maxBytes: 1KiB}\n", kvstore.EventLimits{}, "events.stats.maxBytes: must be at least"},
		{"bad raw mode", "events:\n  leases: {raw: some}\n", kvstore.EventLimits{}, `events.leases.raw: "some" is not one of [ends all reports]`},
		{"bad interval", "events:\n  stats: {interval: 1500ms}\n", kvstore.EventLimits{}, "events.stats.interval: must be whole seconds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(head + tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.EventLimits(); got != tc.want {
				t.Fatalf("limits %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLeaseHistoryConfig(t *testing.T) {
	cfg, err := Parse([]byte("providers:\n  - {name: a, type: local}\nevents:\n  leases: {raw: reports, maxAge: 1h}\n  stats: {interval: 10s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if raw, interval := cfg.LeaseHistory(); raw != events.RawReports || interval != 10*time.Second {
		t.Fatalf("raw %q, interval %s", raw, interval)
	}
	if raw, interval := (File{}).LeaseHistory(); raw != "" || interval != 0 {
		t.Fatalf("no events block: raw %q, interval %s", raw, interval)
	}
}
