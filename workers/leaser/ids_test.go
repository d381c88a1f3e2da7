package leaser

import (
	"strings"
	"testing"
)

func TestLeaseIDs(t *testing.T) {
	tok := newToken()
	if !validToken(tok) || tok == newToken() {
		t.Fatalf("token %q", tok)
	}
	id := leaseID{Proxy: "crawl-1", Slot: 12, Token: tok}
	back, err := parseLeaseID(id.String())
	if err != nil || back != id {
		t.Fatalf("round trip of %s: %+v %v", id, back, err)
	}
	for _, bad := range []string{"", "crawl-1", "crawl-1.0", "crawl-1.0." + tok + ".x", "Crawl-1.0." + tok,
		"crawl-1.01." + tok, "crawl-1.-1." + tok, "crawl-1.+1." + tok, "crawl-1.10000." + tok, "crawl-1.0." + strings.ToUpper(tok),
		"crawl-1.0." + tok[:15], ".0." + tok, "crawl-1..", "a.b.c.0." + tok} {
		if _, err := parseLeaseID(bad); err == nil {
			t.Errorf("parseLeaseID(%q) accepted", bad)
		}
	}
	if p, s, ok := parseSlotKey("crawl-1.3"); !ok || p != "crawl-1" || s != 3 {
		t.Fatal(p, s, ok)
	}
	for _, target := range []string{"example.com", "https://a.example/x?y=1", "host:443", "ü.example"} {
		p, tg, ok := parseCooldownKey(targetCooldownKey("crawl-1", target))
		if !ok || p != "crawl-1" || tg != target {
			t.Errorf("cooldown key of %q: %q %q %v", target, p, tg, ok)
		}
	}
	if p, tg, ok := parseCooldownKey(globalCooldownKey("crawl-1")); !ok || p != "crawl-1" || tg != "" {
		t.Fatal(p, tg, ok)
	}
}
