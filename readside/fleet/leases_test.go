package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/fleet/fleettest"
)

func TestLoadLeasesByHolder(t *testing.T) {
	st := newStore(t)
	now := time.Now().UTC().Truncate(time.Second)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	put := func(key string, l events.Lease) {
		l.V, l.Proxy, l.Token = 1, key[:strings.LastIndexByte(key, '.')], "SENTINEL-TOKEN-"+key
		fleettest.Put(t, st.Leases.ForKey(key), key, l)
	}
	put("p1.0", events.Lease{Holder: "scrapy", Target: "a.example", AcquiredAt: at(-5 * time.Minute), ExpiresAt: at(time.Minute)})
	put("p1.1", events.Lease{Holder: "scrapy", Target: "b.example", Sticky: "s1", AcquiredAt: at(-2 * time.Minute), ExpiresAt: at(30 * time.Second), Hold: &events.LeaseHold{Key: "holder.x.c2NyYXB5.0", Token: "SENTINEL-HOLD"}})
	put("p2.0", events.Lease{Holder: "scrapy", Target: "a.example", Sticky: "s1", AcquiredAt: at(-time.Minute), ExpiresAt: at(2 * time.Minute)})
	put("p3.0", events.Lease{Holder: "crawlee", AcquiredAt: at(-time.Minute), ExpiresAt: at(time.Minute)})
	put("p3.1", events.Lease{AcquiredAt: at(-time.Second), ExpiresAt: at(time.Minute)})
	fleettest.Put(t, st.Leases.ForKey("p4.0"), "p4.0", []byte("not json"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := fleet.LoadLeases(ctx, st.Leases, now)
	if len(l.Errors) != 0 {
		t.Fatal(l.Errors)
	}
	var rows []string
	for _, r := range l.Rows {
		rows = append(rows, fmt.Sprintf("%s %s.%d %s %s capped=%t", r.Holder, r.Proxy, r.Slot, r.Target, r.Sticky, r.Capped))
	}
	want := []string{
		" p3.1   capped=false", " p4.0   capped=false", // no holder first; an undecodable slot is still held
		"crawlee p3.0   capped=false",
		"scrapy p1.0 a.example  capped=false", "scrapy p1.1 b.example s1 capped=true", "scrapy p2.0 a.example s1 capped=false",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	var holders []string
	for _, h := range l.Holders {
		holders = append(holders, fmt.Sprintf("%q leases=%d proxies=%d targets=%d sessions=%d oldest=%s next=%s", h.Holder, h.Leases, h.Proxies, h.Targets, h.Sessions,
			now.Sub(h.Oldest), h.NextExpiry.Sub(now)))
	}
	wantH := []string{
		`"scrapy" leases=3 proxies=2 targets=2 sessions=1 oldest=5m0s next=30s`,
		`"" leases=2 proxies=2 targets=0 sessions=0 oldest=1s next=1m0s`,
		`"crawlee" leases=1 proxies=1 targets=0 sessions=0 oldest=1m0s next=1m0s`,
	}
	if strings.Join(holders, "\n") != strings.Join(wantH, "\n") {
		t.Errorf("holders:\n%s\nwant:\n%s", strings.Join(holders, "\n"), strings.Join(wantH, "\n"))
	}
	if got := len(l.Of("scrapy")); got != 3 {
		t.Errorf("Of(scrapy) = %d rows", got)
	}
	// Whoever reads the view cannot renew or release a crawler's lease: no token leaves.
	b, _ := json.Marshal(l)
	if strings.Contains(string(b), "SENTINEL") {
		t.Fatalf("a token is in the view: %s", b)
	}
}
