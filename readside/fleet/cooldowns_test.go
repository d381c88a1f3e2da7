package fleet_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/fleet/fleettest"
)

// Cooldowns lists the running ones by proxy, proxy-wide first; ended, undecodable and
// nameless records are left out.
func TestCooldowns(t *testing.T) {
	st := newStore(t)
	now := time.Date(2026, time.March, 4, 12, 0, 0, 0, time.UTC)
	key := func(proxy, target string) string {
		if target == "" {
			return proxy
		}
		return proxy + "." + base64.RawURLEncoding.EncodeToString([]byte(target))
	}
	for _, c := range []events.Cooldown{
		{Proxy: "p2", Target: "b.example", Result: events.ReportBlocked, Holder: "crawler-7", Until: now.Add(10 * time.Minute)},
		{Proxy: "p2", Result: events.ReportFailed, Until: now.Add(5 * time.Minute)},
		{Proxy: "p1", Target: "a.example", Result: events.ReportBlocked, Until: now.Add(time.Second)},
		{Proxy: "p3", Result: events.ReportBlocked, Until: now},                   // ended: waits for its TTL
		{Proxy: "p4", Result: events.ReportBlocked, Until: now.Add(-time.Minute)}, // ended
	} {
		c.V = 1
		fleettest.Put(t, st.Cooldowns, key(c.Proxy, c.Target), c)
	}
	fleettest.Put(t, st.Cooldowns, "p5", []byte("not json"))
	fleettest.Put(t, st.Cooldowns, "p6", []byte(`{"v":1,"until":"2026-03-04T13:00:00Z"}`))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := fleet.Cooldowns(ctx, st.Cooldowns, now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %q %s %s %s", r.Proxy, r.Target, r.Result, r.Holder, r.Until.Sub(now)))
	}
	want := []string{`p1 "a.example" blocked  1s`, `p2 "" failed  5m0s`, `p2 "b.example" blocked crawler-7 10m0s`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("cooldowns:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// No bucket: none; an empty bucket: [], not null.
	if rows, err := fleet.Cooldowns(ctx, nil, now); err != nil || len(rows) != 0 {
		t.Errorf("nil bucket: %v %v", rows, err)
	}
}
