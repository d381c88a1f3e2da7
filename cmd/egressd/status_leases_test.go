package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/fleet/fleettest"
)

func TestStatusHoldersAndLeases(t *testing.T) {
	url, store, _, _ := mixedFleet(t) // three leases of crawler-7 on live proxies, plus two
	now := time.Now()
	fleettest.Put(t, store.Leases.ForKey("slow.0"), "slow.0", events.Lease{V: 1, Proxy: "slow", Token: "SENTINEL-TOKEN", Holder: "scrapy",
		Target: "a.example", Sticky: "basket-1", AcquiredAt: now.Add(-3 * time.Minute), ExpiresAt: now.Add(90 * time.Second)})

	code, out, errOut := runStatus(t, "holders", "--nats-url", url)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	if !strings.Contains(spaced(out), "\nHOLDER LEASES PROXIES TARGETS SESSIONS OLDEST NEXT-EXPIRY\ncrawler-7 5 4 0 0 - in ") ||
		!strings.Contains(spaced(out), "\nscrapy 1 1 1 1 3m in 1m") || !strings.Contains(out, "6 leases by 2 holders.") {
		t.Fatalf("holders:\n%s", out)
	}

	code, out, _ = runStatus(t, "leases", "--nats-url", url, "--holder", "scrapy")
	if code != 0 || !strings.Contains(spaced(out), "\nscrapy slow 0 a.example basket-1 no 3m in 1m") || strings.Contains(out, "crawler-7") {
		t.Fatalf("code %d, leases of scrapy:\n%s", code, out)
	}
	code, out, _ = runStatus(t, "leases", "--nats-url", url)
	if code != 0 || !strings.Contains(out, "No acquires wait for a slot.") {
		t.Fatalf("code %d, leases without waiters:\n%s", code, out)
	}
	fleettest.Put(t, store.LeaseState, "wait.0a", events.Waiter{V: 1, Replica: "r1", Worker: "host-1", Holder: "scrapy",
		Selector: map[string]string{"geo": "de", "pool": "crawl"}, Target: "b.example", Since: now.Add(-12 * time.Second), Deadline: now.Add(48 * time.Second)})
	fleettest.Put(t, store.LeaseState, "wait.0b", events.Waiter{V: 1, Replica: "r2", Holder: "crawler-7", Since: now.Add(-90 * time.Second), Deadline: now.Add(-30 * time.Second)})
	fleettest.Put(t, store.LeaseState, "holder._.eA.0", events.HolderSlot{V: 1, Holder: "x", Token: "SENTINEL-HOLD"})
	code, out, _ = runStatus(t, "leases", "--nats-url", url)
	// Oldest first (by revision), times as ages: the wall clock moves on while the test runs.
	if code != 0 || !strings.Contains(spaced(out), "\nWAITING HOLDER SELECTOR TARGET LEASER WAITED GIVES-UP\n1 scrapy geo=de,pool=crawl b.example host-1 1") ||
		!strings.Contains(spaced(out), "\n- crawler-7 - - - 1m expired (its leaser is gone)\n") ||
		!strings.Contains(out, "1 acquires wait for a slot, the longest for 1") || strings.Contains(out, "SENTINEL") {
		t.Fatalf("code %d, leases with waiters:\n%s", code, out)
	}
	code, out, _ = runStatus(t, "leases", "--nats-url", url, "--holder", "nobody")
	if code != 0 || !strings.Contains(out, "No leases match (6 held).") {
		t.Fatalf("code %d, leases of nobody:\n%s", code, out)
	}
	code, out, _ = runStatus(t, "leases", "--nats-url", url, "-o", "json")
	var rows []fleet.LeaseRow
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != 6 {
		t.Fatalf("code %d, %v, json:\n%s", code, err, out)
	}
	if strings.Contains(out, "SENTINEL") {
		t.Fatal("a lease token is shown")
	}
	if code, _, errOut := runStatus(t, "pools", "--holder", "x", "--nats-url", url); code != 2 || !strings.Contains(errOut, "--holder selects leases") {
		t.Fatalf("--holder on pools: code %d, %s", code, errOut)
	}
}
