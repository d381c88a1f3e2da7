package pools

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// quarantinePool is a one-member pool that recycles at one blocked target, with the
// quarantine given (a JSON object, or "" for the default).
func quarantinePool(t *testing.T, quarantine string) *world {
	doc := `{"template":{"provider":"local"},"replicas":1,"recycle":{"blockedTargets":1}}`
	if quarantine != "" {
		doc = fmt.Sprintf(`{"template":{"provider":"local"},"replicas":1,"recycle":{"blockedTargets":1,"quarantine":%s}}`, quarantine)
	}
	w := newWorld(t, doc)
	w.settle()
	return w
}

// burn reports the pool's only member blocked, seen leaving from addr, and plans once.
func (w *world) burn(addr string) (string, outcome) {
	m := w.members()[0]
	w.blocked[m] = 1
	w.egress[m] = egress{addr: addr, observed: true, own: addr}
	return m, w.step()
}

// successorOf is the ledger's successor of name, while name is in the ledger.
func (w *world) successorOf(name string) (events.PoolMember, bool) {
	for _, m := range w.ledger.Members {
		if m.Name == name && m.Successor != "" {
			return w.member(m.Successor)
		}
	}
	return events.PoolMember{}, false
}

// checked is the serving member whose egress is checked against the quarantine, if any.
func (w *world) checked() (events.PoolMember, bool) {
	for _, m := range w.ledger.Members {
		if m.QuarantineRound > 0 && m.Retire == "" && m.DrainingSince.IsZero() {
			return m, true
		}
	}
	return events.PoolMember{}, false
}

func (w *world) member(name string) (events.PoolMember, bool) {
	i := slices.IndexFunc(w.ledger.Members, func(m events.PoolMember) bool { return m.Name == name })
	if i < 0 {
		return events.PoolMember{}, false
	}
	return w.ledger.Members[i], true
}

// A burned member's egress goes into quarantine once, with the neighbourhood configured,
// before the ledger that retires it; its successor is checked (round 1).
func TestBurnedAddressIsQuarantined(t *testing.T) {
	cases := []struct {
		name, quarantine, addr, prefix string
		until                          time.Duration
	}{
		{"default: the address alone, a day", "", "203.0.113.10", "203.0.113.10/32", 24 * time.Hour},
		{"a /24 for an hour", `{"seconds":3600,"ipv4Prefix":24}`, "203.0.113.10", "203.0.113.0/24", time.Hour},
		{"an IPv6 /64", `{"ipv6Prefix":64}`, "2001:db8:1:2::7", "2001:db8:1:2::/64", 24 * time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := quarantinePool(t, c.quarantine)
			m, out := w.burn(c.addr)
			if len(out.Quarantine) != 1 {
				t.Fatalf("quarantine written %+v, want one record", out.Quarantine)
			}
			q := out.Quarantine[0]
			if q.Address != c.addr || q.Prefix != c.prefix || q.Proxy != m || q.Pool != "web" || q.Reason != events.ReasonBurned ||
				!q.At.Equal(w.now) || !q.Until.Equal(w.now.Add(c.until)) {
				t.Errorf("record %+v", q)
			}
			if !slices.Contains(reasons(out), events.ReasonAddressQuarantined) {
				t.Errorf("events %v, want AddressQuarantined", reasons(out))
			}
			if s, ok := w.successorOf(m); !ok || s.QuarantineRound != 1 {
				t.Errorf("successor %+v (found %v), want quarantine round 1", s, ok)
			}
			if again := w.step(); len(again.Quarantine) != 0 {
				t.Errorf("quarantine written again: %+v", again.Quarantine)
			}
		})
	}
}

// A burned member whose traffic left from another address than its own (a NAT, a local
// proxy without bindSource) puts its own address into quarantine with the egress.
func TestBurnedInstanceAddressIsQuarantined(t *testing.T) {
	w := quarantinePool(t, "")
	m := w.members()[0]
	w.blocked[m] = 1
	w.egress[m] = egress{addr: "198.51.100.1", observed: true, own: "127.0.62.2"}
	out := w.step()
	if len(out.Quarantine) != 1 || out.Quarantine[0].Address != "198.51.100.1" || out.Quarantine[0].Instance != "127.0.62.2" {
		t.Fatalf("quarantine %+v, want the egress with the instance's own address", out.Quarantine)
	}
}

// Quarantine off, or a burned member whose egress is unknown: nothing in quarantine, and the
// successor is not checked.
func TestNoQuarantine(t *testing.T) {
	for _, c := range []struct{ name, quarantine, addr string }{
		{"off", `{"seconds":0}`, "203.0.113.10"},
		{"egress unknown", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := quarantinePool(t, c.quarantine)
			m, out := w.burn(c.addr)
			if len(out.Quarantine) != 0 {
				t.Fatalf("quarantine written %+v", out.Quarantine)
			}
			if s, ok := w.successorOf(m); !ok || (c.quarantine != "" && s.QuarantineRound != 0) {
				t.Errorf("successor %+v (found %v)", s, ok)
			}
		})
	}
}

// A member that replaced a burned one and leaves from a quarantined address (or its
// neighbourhood) is replaced again, successor first, at most maxReplacements times in a row;
// then it is kept, with an event saying why. One seen leaving from elsewhere is kept and no
// longer checked; so is one whose quarantine has ended.
func TestReplacementInQuarantineIsReplacedAgain(t *testing.T) {
	cases := []struct {
		name, quarantine, next string
		after                  time.Duration // the clock moves on before the successor's egress is known
		replaced               int
		kept                   bool
	}{
		{"same address, default bound", "", "203.0.113.10", 0, 3, true},
		{"same address, bound 1", `{"maxReplacements":1}`, "203.0.113.10", 0, 1, true},
		{"same address, bound 0", `{"maxReplacements":0}`, "203.0.113.10", 0, 0, true},
		{"a neighbour within the /24", `{"ipv4Prefix":24,"maxReplacements":2}`, "203.0.113.99", 0, 2, true},
		{"a neighbour, but the address alone is quarantined", "", "203.0.113.99", 0, 0, false},
		{"another address", "", "198.51.100.7", 0, 0, false},
		{"the quarantine has ended", `{"seconds":60}`, "203.0.113.10", time.Minute, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := quarantinePool(t, c.quarantine)
			burned, _ := w.burn("203.0.113.10")
			w.now = w.now.Add(c.after)
			w.settle()
			replaced, kept := 0, false
			for range 20 {
				s, ok := w.checked()
				if !ok {
					break
				}
				w.egress[s.Name] = egress{addr: c.next, observed: true, own: c.next}
				out := w.step()
				for _, ev := range out.Events {
					if ev.Pool.Quarantine == nil {
						continue // the successor's and the drain's events
					}
					switch ev.Reason {
					case events.ReasonQuarantined:
						replaced++
						if ev.Pool.Quarantine.Proxy != burned {
							t.Errorf("event %+v does not name the burned member's quarantine", ev.Pool)
						}
					case events.ReasonQuarantineKept:
						kept = true
					}
				}
				if m, ok := w.member(s.Name); ok && m.Retire == "" && m.QuarantineRound != 0 {
					t.Fatalf("member %s still checked after its egress was seen: %+v", s.Name, m)
				}
				w.settle()
			}
			if replaced != c.replaced || kept != c.kept {
				t.Errorf("replaced %d times, kept %v; want %d, %v", replaced, kept, c.replaced, c.kept)
			}
			if len(w.members()) != 1 {
				t.Errorf("members %v, want one", w.members())
			}
		})
	}
}

// An expected egress alone can show a replacement in quarantine (it is replaced before a
// probe), but cannot clear it: only an observed one does.
func TestExpectedEgressReplacesButDoesNotClear(t *testing.T) {
	w := quarantinePool(t, "")
	burned, _ := w.burn("203.0.113.10")
	s, _ := w.successorOf(burned)
	w.egress[s.Name] = egress{addr: "198.51.100.7", own: "198.51.100.7"}
	w.step()
	if m, _ := w.member(s.Name); m.QuarantineRound != 1 || m.Retire != "" {
		t.Fatalf("after an expected egress out of quarantine: %+v, want still checked", m)
	}
	w.egress[s.Name] = egress{addr: "203.0.113.10", own: "203.0.113.10"}
	if out := w.step(); !slices.Contains(reasons(out), events.ReasonQuarantined) {
		t.Fatalf("events %v, want Quarantined on the expected egress", reasons(out))
	}
}

// A replacement is kept at once where a new member would get the same egress: other
// members leave from the quarantined address too (the egress is shared), or it is not the
// member's own address (a NAT, its host: local proxies without bindSource, a VM on a NAT
// network), even as a pool's only member.
func TestKeptWhereANewMemberWouldLeaveFromItToo(t *testing.T) {
	cases := []struct {
		name, egress, burnedOwn, nextOwn string
		replicas                         int
	}{
		{"shared by the other members", "198.51.100.1", "198.51.100.1", "198.51.100.1", 2},
		{"not the member's own address", "127.0.0.1", "127.0.62.2", "127.0.62.3", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, fmt.Sprintf(`{"template":{"provider":"local"},"replicas":%d,"recycle":{"blockedTargets":1}}`, c.replicas))
			w.settle()
			ms := w.members()
			for _, m := range ms {
				w.egress[m] = egress{addr: c.egress, observed: true, own: c.burnedOwn}
			}
			w.blocked[ms[0]] = 1
			w.step()
			s, _ := w.successorOf(ms[0])
			w.egress[s.Name] = egress{addr: c.egress, observed: true, own: c.nextOwn}
			out := w.step()
			if !slices.Contains(reasons(out), events.ReasonQuarantineKept) || slices.Contains(reasons(out), events.ReasonQuarantined) {
				t.Fatalf("events %v, want QuarantineKept and no Quarantined", reasons(out))
			}
		})
	}
}

// A replacement in quarantine that holds a lease drains: it is never deleted while the lease
// runs (before the drain timeout), and its successor is Ready first.
func TestQuarantinedMemberWithLeasesDrains(t *testing.T) {
	w := quarantinePool(t, "")
	burned, _ := w.burn("203.0.113.10")
	w.settle()
	s, _ := w.member(w.members()[0])
	if s.Name == burned {
		t.Fatal("the burned member is still there")
	}
	w.leases[s.Name] = 2
	w.egress[s.Name] = egress{addr: "203.0.113.10", observed: true, own: "203.0.113.10"}
	for range 10 {
		w.step()
		w.now = w.now.Add(drainSettle)
	}
	if _, ok := w.owned[s.Name]; !ok {
		t.Fatal("a leased member was deleted for quarantine")
	}
	if w.phase[s.Name] != events.PhaseDraining {
		t.Errorf("phase %s, want Draining", w.phase[s.Name])
	}
	next, ok := w.successorOf(s.Name)
	if !ok || w.phase[next.Name] != events.PhaseReady || next.QuarantineRound != 2 {
		t.Errorf("successor %+v (found %v), want Ready in round 2", next, ok)
	}
	delete(w.leases, s.Name)
	w.settle()
	if _, ok := w.owned[s.Name]; ok {
		t.Error("released, the quarantined member is still there")
	}
}
