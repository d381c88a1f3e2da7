package leaser_test

import (
	"testing"

	"github.com/egressd/egressd/workers/leaser"
)

// BenchmarkAcquireReleaseStrategies is BenchmarkAcquireRelease with each strategy, a capped
// holder (a holder slot created and deleted beside the proxy slot) and sticky sessions (the
// binding read from the view, or from KV for a strict one), each against the balanced acquire
// of the same run (docs/performance.md#strategies-sessions-and-holder-caps).
func BenchmarkAcquireReleaseStrategies(b *testing.B) {
	for _, bc := range []struct {
		name, req string
		capped    bool
	}{
		{"balanced", `{"ttlSeconds":60}`, false},
		{"round-robin", `{"ttlSeconds":60,"strategy":"round-robin"}`, false},
		{"random", `{"ttlSeconds":60,"strategy":"random"}`, false},
		{"lowest-latency", `{"ttlSeconds":60,"strategy":"lowest-latency"}`, false},
		{"balanced-target", `{"ttlSeconds":60,"target":"shop.example"}`, false},
		{"best-for-target", `{"ttlSeconds":60,"target":"shop.example","strategy":"best-for-target"}`, false},
		{"tiers", `{"ttlSeconds":60,"target":"shop.example","tiers":[{}]}`, false},
		{"holder-capped", `{"ttlSeconds":60,"holder":"c7"}`, true},
		{"session-soft", `{"ttlSeconds":60,"sticky":"s42","sessionSeconds":600}`, false},
		{"session-strict", `{"ttlSeconds":60,"sticky":"s42","sessionSeconds":600,"stickyMode":"strict"}`, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var tune func(*leaser.Config)
			if bc.capped {
				tune = func(c *leaser.Config) { c.MaxPerHolder = 2 }
			}
			acquireReleaseWith(b, startBenchLeaser(b, nil, tune), bc.req)
		})
	}
}
