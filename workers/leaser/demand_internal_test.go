package leaser

import (
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// The demand book's sliding window: refusals and grants count while they are in the window
// and leave it by themselves; a scope with nothing left writes one record of zeros, then none;
// a pool holding leases has a record without any acquire.
func TestDemandBookWindow(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	b := newDemandBook(10*time.Second, func() time.Time { return now })
	b.setPool("web", &schemas.PoolSpec{Template: schemas.ProxySpec{Attributes: map[string]string{"geo": "de"}}})
	b.setPool("other", &schemas.PoolSpec{Template: schemas.ProxySpec{Attributes: map[string]string{"geo": "us"}}})
	held := map[string]int{}
	heldFn := func(map[string]map[string]string) (map[string]int, map[string]int) { return held, map[string]int{} }
	rec := func() map[string]events.PoolDemand { return b.records("m1", heldFn) }

	b.refused(map[string]string{"geo": "de"}, "")
	b.refused(map[string]string{"geo": "de"}, "c1")
	b.refused(map[string]string{"pool": "web"}, "c1") // the same holder again
	now = now.Add(4 * time.Second)
	b.granted("web", map[string]string{"geo": "de"}, "c2")
	got := rec()
	if d := got["web"]; d.Refused != 2 || d.Granted != 1 || d.GrantsPerSecond != 0.1 || d.WindowSeconds != 10 || d.Pool != "web" {
		t.Fatalf("web: %+v", d)
	}
	if _, ok := got["other"]; ok {
		t.Fatalf("geo=de counted towards other: %+v", got)
	}
	// Seven seconds on, the refusals (at 0 s) have left the 10 s window; the grant (at 4 s) not yet.
	now = now.Add(7 * time.Second)
	if d := rec()["web"]; d.Refused != 0 || d.Granted != 1 {
		t.Fatalf("after 11 s: %+v", d)
	}
	// Everything out of the window: one record of zeros, then nothing, and the scope forgotten.
	now = now.Add(10 * time.Second)
	if d, ok := rec()["web"]; !ok || d.Refused+d.Granted+d.Held+d.Waiting != 0 {
		t.Fatalf("the record of zeros: %+v %v", d, ok)
	}
	if _, ok := rec()["web"]; ok || len(b.scopes) != 0 {
		t.Fatalf("an idle scope still written: %v", b.scopes)
	}
	// Held leases alone give a pool a record.
	held["web"] = 3
	if d := rec()["web"]; d.Held != 3 {
		t.Fatalf("held: %+v", d)
	}
	// A selector matching no pool has a scope of its own; a grant without holder answers
	// one anonymous refusal; a waiter counts until it is done.
	sel := map[string]string{"tier": "x"}
	b.refused(sel, "")
	b.refused(sel, "")
	b.granted("", sel, "")
	done := b.wait(sel)
	d := rec()[events.SelectorScope(sel)]
	if d.Refused != 1 || d.Granted != 1 || d.Waiting != 1 || d.Selector["tier"] != "x" || d.Pool != "" {
		t.Fatalf("selector scope: %+v", d)
	}
	done()
	done()
	if d := rec()[events.SelectorScope(sel)]; d.Waiting != 0 {
		t.Fatalf("waiting after done: %+v", d)
	}
	// A pool removed no longer matches.
	b.setPool("other", nil)
	b.refused(map[string]string{"geo": "us"}, "")
	if _, ok := rec()["other"]; ok {
		t.Fatal("a removed pool still counted")
	}
}
