package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/fleet/fleettest"
)

// The addresses still in quarantine at the reader's clock, the one ending first first; an
// ended record (waiting for its TTL) and one that does not decode are left out.
func TestQuarantine(t *testing.T) {
	st := newStore(t)
	now := time.Date(2026, time.March, 4, 12, 0, 0, 0, time.UTC)
	for _, q := range []events.Quarantine{
		{Address: "203.0.113.10", Prefix: "203.0.113.10/32", Pool: "web", Proxy: "web-a", Until: now.Add(24 * time.Hour)},
		{Address: "2001:db8::7", Prefix: "2001:db8::/64", Pool: "web", Proxy: "web-b", Until: now.Add(time.Hour)},
		{Address: "198.51.100.1", Prefix: "198.51.100.1/32", Pool: "web", Proxy: "web-c", Until: now}, // ended
	} {
		q.V, q.Reason, q.At = 1, events.ReasonBurned, now.Add(-time.Minute)
		fleettest.Put(t, st.Quarantine, events.QuarantineKey(q.Address), q)
	}
	fleettest.Put(t, st.Quarantine, "garbage", []byte("not json"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := fleet.Quarantine(ctx, st.Quarantine, now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, q := range rows {
		got = append(got, fmt.Sprintf("%s %s %s %s", q.Address, q.Prefix, q.Proxy, q.Until.Sub(now)))
	}
	want := []string{"2001:db8::7 2001:db8::/64 web-b 1h0m0s", "203.0.113.10 203.0.113.10/32 web-a 24h0m0s"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("quarantine:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rows, err := fleet.Quarantine(ctx, nil, now); err != nil || len(rows) != 0 {
		t.Errorf("nil bucket: %v %v", rows, err)
	}
}
