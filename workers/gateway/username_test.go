package gateway

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

var testAttrs = []string{"geo", "region"}

func TestParseUsername(t *testing.T) {
	for _, c := range []struct {
		user, crawler string
		want          Route
	}{
		{"", "crawler-7", Route{}},
		{"crawler-7", "crawler-7", Route{}},
		{"crawler-7-pool-web-geo-de-session-abc123-ttl-600", "crawler-7",
			Route{Selector: map[string]string{"pool": "web", "geo": "de"}, Session: "abc123", SessionTTL: 600 * time.Second}},
		{"pool-web", "crawler-7", Route{Selector: map[string]string{"pool": "web"}}},
		{"session-s1", "c", Route{Session: "s1", SessionTTL: DefaultSessionTTL}},
		{"session-s1-sticky-strict", "c", Route{Session: "s1", SessionTTL: DefaultSessionTTL, StickyMode: events.StickyStrict}},
		{"strategy-round_robin-anon-elite", "c", Route{Strategy: events.StrategyRoundRobin, MinAnonymity: events.AnonymityElite}},
		{"strategy-best_for_target", "c", Route{Strategy: events.StrategyBestForTarget}},
		{"strategy-packed", "c", Route{Strategy: events.StrategyPacked}},
		{"strategy-lowest%2Dlatency", "c", Route{Strategy: events.StrategyLowestLatency}},
		{"region-us%2Deast", "c", Route{Selector: map[string]string{"region": "us-east"}}},
		// A crawler whose name is not at the front: the username is pairs alone.
		{"geo-fr", "crawler-7", Route{Selector: map[string]string{"geo": "fr"}}},
	} {
		got, err := ParseUsername(c.user, c.crawler, testAttrs)
		if err != nil {
			t.Errorf("ParseUsername(%q): %v", c.user, err)
			continue
		}
		if !maps.Equal(got.Selector, c.want.Selector) || got.Session != c.want.Session || got.SessionTTL != c.want.SessionTTL ||
			got.StickyMode != c.want.StickyMode || got.Strategy != c.want.Strategy || got.MinAnonymity != c.want.MinAnonymity {
			t.Errorf("ParseUsername(%q) = %+v, want %+v", c.user, got, c.want)
		}
	}
}

// Every bad username is an error naming the key at fault, never a default.
func TestParseUsernameNamesTheBadKey(t *testing.T) {
	for _, c := range []struct{ user, key, msg string }{
		{"crawler-7-color-red", "color", "unknown key"},
		{"crawler-7-pool-web-zone-x", "zone", "unknown key"},
		{"pool-web-pool-api", "pool", "given twice"},
		{"pool", "pool", "has no value"},
		{"pool-", "pool", "has no value"},
		{"ttl-600", "ttl", "give a session key too"},
		{"sticky-strict", "sticky", "give a session key too"},
		{"session-a-ttl-0", "ttl", "whole seconds"},
		{"session-a-ttl-x", "ttl", "whole seconds"},
		{"session-a-ttl-86401", "ttl", "whole seconds"},
		{"session-a-sticky-hard", "sticky", "soft or strict"},
		{"strategy-fastest", "strategy", "balanced, round_robin, random, lowest_latency, best_for_target, packed"},
		{"anon-transparent", "anon", "anonymous or elite"},
		{"geo-%zz", "geo", "percent-encoding"},
		{"session-" + strings.Repeat("a", 129), "session", "at most 128"},
		{"pool--web", "pool", "has no value"},
		{"-pool-web", "(username)", "empty key"},
		{"pool-web-", "(username)", "empty key"},
		{strings.Repeat("a", 1025), "(username)", "longer than"},
	} {
		_, err := ParseUsername(c.user, "crawler-7", testAttrs)
		var ue *UsernameError
		if !errors.As(err, &ue) || ue.Key != c.key || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), `"`+c.key+`"`) {
			t.Errorf("ParseUsername(%q) = %v, want an error naming %q with %q", c.user, err, c.key, c.msg)
		}
	}
}

// FuzzParseUsername: any username parses or is refused with a named key; never a panic, and
// a route that parses has what the lease service accepts.
func FuzzParseUsername(f *testing.F) {
	for _, s := range []string{"", "crawler-7-pool-web-geo-de-session-abc123-ttl-600", "pool-a-pool-b", "geo-%41", "session-x-sticky-strict-strategy-random", "--", "ttl-9999999999999999999"} {
		f.Add(s, "crawler-7")
	}
	f.Fuzz(func(t *testing.T, user, crawler string) {
		r, err := ParseUsername(user, crawler, testAttrs)
		if err != nil {
			var ue *UsernameError
			if !errors.As(err, &ue) || ue.Key == "" {
				t.Fatalf("ParseUsername(%q) = %v: not a UsernameError naming a key", user, err)
			}
			return
		}
		if len(r.Selector) > maxSelectorPairs || len(r.Session) > maxSessionKey {
			t.Fatalf("ParseUsername(%q) = %+v: out of bounds", user, r)
		}
		if (r.Session == "") != (r.SessionTTL == 0) || r.SessionTTL < 0 || r.SessionTTL > maxSessionTTL {
			t.Fatalf("ParseUsername(%q) = %+v: a session's lifetime without a session, or out of range", user, r)
		}
		for k := range r.Selector {
			if k != "pool" && k != "geo" && k != "region" {
				t.Fatalf("ParseUsername(%q) took key %q", user, k)
			}
		}
	})
}
