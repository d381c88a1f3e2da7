package leaser_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/egressd/egressd/workers/leaser/selection"
)

// With a /24 neighbourhood, a block on 127.0.5.10 for a site also cools 127.0.5.11 for it,
// for a quarter of the block (unless it already cools longer there), and not 127.0.6.10 nor
// the neighbour for another site; the neighbour's cooldown says whose block caused it.
func TestNeighbourCooldowns(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) {
		c.Neighbours = leaser.Neighbours{Neighbourhood: selection.Neighbourhood{V4Bits: 24}}
	})
	r.seed(proxy{name: "px-a", maxLeases: 5}, proxy{name: "px-b", maxLeases: 5}, proxy{name: "px-c", maxLeases: 5},
		proxy{name: "px-d", maxLeases: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, ip := range map[string]string{"px-a": "127.0.5.10", "px-b": "127.0.5.11", "px-c": "127.0.6.10", "px-d": "127.0.5.12"} {
		st := events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local", Host: "local", IP: ip, Port: 3128}
		if _, err := kvstore.PutJSON(ctx, r.store.Status, name, st); err != nil {
			t.Fatal(err)
		}
	}
	// px-d already cools for the site (an earlier block of its own), longer than a
	// neighbour's cooldown would be.
	own := events.Cooldown{V: 1, Proxy: "px-d", Target: "shop.example", Result: events.ReportBlocked, Until: time.Now().Add(time.Hour)}
	if _, err := kvstore.PutJSON(ctx, r.store.Cooldowns, "px-d."+base64.RawURLEncoding.EncodeToString([]byte("shop.example")), own); err != nil {
		t.Fatal(err)
	}
	r.startLeasers(1)

	var ga events.LeaseGrant
	for ga.Proxy != "px-a" {
		ga = r.mustAcquire(events.AcquireRequest{Holder: "c1", Target: "news.example"})
	}
	rr := r.report(events.ReportRequest{ID: ga.ID, Result: events.ReportBlocked, Target: "shop.example", CooldownSeconds: 400})
	// px-b is cooled by px-a's block; px-d by its own (px-a's would have been shorter).
	if rr.NeighboursCooled != 1 {
		t.Fatalf("report reply %+v: want 1 neighbour cooled (px-b; px-d already cools longer)", rr)
	}
	got := map[string]events.Cooldown{}
	for _, c := range r.cooldownRecords() {
		got[c.Proxy+" "+c.Target] = c
	}
	b, ok := got["px-b shop.example"]
	if !ok || b.Result != events.CooldownNeighbour || b.Because != "px-a" || b.Neighbourhood != "127.0.5.0/24" ||
		b.Until.After(time.Now().Add(101*time.Second)) || b.Until.Before(time.Now().Add(90*time.Second)) {
		t.Fatalf("px-b's cooldown %+v (present %v): want a neighbour's of 100s caused by px-a in 127.0.5.0/24", b, ok)
	}
	if d := got["px-d shop.example"]; d.Result != events.ReportBlocked {
		t.Fatalf("px-d's own block was replaced: %+v", d)
	}
	for _, k := range []string{"px-c shop.example", "px-b news.example"} {
		if c, ok := got[k]; ok {
			t.Fatalf("%s cools: %+v", k, c)
		}
	}
	// Acquires for the site skip the neighbour, not the proxy of another /24.
	for range 4 {
		g := r.mustAcquire(events.AcquireRequest{Holder: "c2", Target: "shop.example"})
		if g.Proxy != "px-c" {
			t.Fatalf("granted %s for shop.example; only px-c is not cooling there", g.Proxy)
		}
		r.release(g.ID)
	}
}

// With neighbourhoods, a holder's leases for one site spread over them before one is reused:
// its second lease goes to the other /24 although the least loaded proxy is a neighbour of
// its first; a third, with every neighbourhood taken, goes wherever the strategy says.
func TestLeasesSpreadOverNeighbourhoods(t *testing.T) {
	r := newRig(t, func(c *leaser.Config) {
		c.Neighbours = leaser.Neighbours{Neighbourhood: selection.Neighbourhood{V4Bits: 24}}
	})
	ips := map[string]string{"px-a": "127.0.5.10", "px-b": "127.0.5.11", "px-c": "127.0.6.10", "px-d": "127.0.6.11"}
	r.seed(proxy{name: "px-a", maxLeases: 5, attrs: map[string]string{"id": "a"}}, proxy{name: "px-b", maxLeases: 5, attrs: map[string]string{"id": "b"}},
		proxy{name: "px-c", maxLeases: 5, attrs: map[string]string{"id": "c"}}, proxy{name: "px-d", maxLeases: 5, attrs: map[string]string{"id": "d"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, ip := range ips {
		st := events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local", Host: "local", IP: ip, Port: 3128}
		if _, err := kvstore.PutJSON(ctx, r.store.Status, name, st); err != nil {
			t.Fatal(err)
		}
	}
	r.startLeasers(1)
	// Another holder loads the 127.0.6.0/24 proxies, so balancing alone prefers 127.0.5.x.
	for _, id := range []string{"c", "c", "d", "d"} {
		r.mustAcquire(events.AcquireRequest{Holder: "other", Selector: map[string]string{"id": id}})
	}
	first := r.mustAcquire(events.AcquireRequest{Holder: "h", Target: "shop.example"})
	second := r.mustAcquire(events.AcquireRequest{Holder: "h", Target: "shop.example"})
	hood := func(p string) string { return ips[p][:len("127.0.5")] }
	if hood(first.Proxy) != "127.0.5" || hood(second.Proxy) != "127.0.6" {
		t.Fatalf("first lease on %s, second on %s: want the second in the other /24", first.Proxy, second.Proxy)
	}
	// Another site, or another holder, is not spread against h's leases.
	if g := r.mustAcquire(events.AcquireRequest{Holder: "h", Target: "news.example"}); hood(g.Proxy) != "127.0.5" {
		t.Fatalf("a lease for another site went to %s", g.Proxy)
	}
	third := r.mustAcquire(events.AcquireRequest{Holder: "h", Target: "shop.example"})
	if third.Proxy == "" {
		t.Fatal("no third lease with every neighbourhood taken")
	}
}
