package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

// poolWatch follows, on a client connection of its own, every change of proxies and
// proxy_status, and keeps what the pool tests assert at every observation rather than at a
// sample: the most members the pool ever had, and the fewest Ready once it was first full.
type poolWatch struct {
	mu       sync.Mutex
	pool     string
	owned    map[string]bool
	phases   map[string]events.Phase
	highest  int
	minReady int  // after armed
	armed    bool // counting minReady
}

// watchPool watches as the test's own client of n (the all-in-one's embedded NATS).
func watchPool(t *testing.T, n *node, pool string) *poolWatch {
	t.Helper()
	_, js := n.client()
	return watchPoolJS(t, js, pool)
}

// watchPoolJS watches through js until the test ends.
func watchPoolJS(t *testing.T, js jetstream.JetStream, pool string) *poolWatch {
	t.Helper()
	w := &poolWatch{pool: pool, owned: map[string]bool{}, phases: map[string]events.Phase{}, minReady: 1 << 30}
	for _, b := range []string{events.BucketProxies, events.BucketStatus} {
		followBucket(t, js, b, func(e jetstream.KeyValueEntry) { w.apply(b, e) })
	}
	return w
}

// followBucket hands fn every entry of bucket, from its first, until the test ends.
func followBucket(t *testing.T, js jetstream.JetStream, bucket string, fn func(jetstream.KeyValueEntry)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	kw, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		defer func() { _ = kw.Stop() }()
		for e := range kw.Updates() {
			if e != nil {
				fn(e)
			}
		}
	})
}

// count is how many members the pool has now.
func (w *poolWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.owned)
}

func (w *poolWatch) apply(bucket string, e jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	put := e.Operation() == jetstream.KeyValuePut
	switch bucket {
	case events.BucketProxies:
		var o struct {
			Pool string `json:"pool"`
		}
		if put && json.Unmarshal(e.Value(), &o) == nil && o.Pool == w.pool {
			w.owned[e.Key()] = true
		} else {
			delete(w.owned, e.Key())
		}
		w.highest = max(w.highest, len(w.owned))
	case events.BucketStatus:
		var st events.ProxyStatus
		if put && json.Unmarshal(e.Value(), &st) == nil {
			w.phases[e.Key()] = st.Phase
		} else {
			delete(w.phases, e.Key())
		}
	}
	if w.armed {
		w.minReady = min(w.minReady, w.readyLocked())
	}
}

func (w *poolWatch) readyLocked() int {
	n := 0
	for name := range w.owned {
		if w.phases[name] == events.PhaseReady {
			n++
		}
	}
	return n
}

// arm starts counting the fewest Ready members from now on.
func (w *poolWatch) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.minReady = true, w.readyLocked()
}

func (w *poolWatch) stats() (highest, minReady int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.highest, w.minReady
}

// members are the status rows of the pool's members (their attribute pool=<name>).
func members(rows map[string]fleet.Row, pool string) []fleet.Row {
	var out []fleet.Row
	for _, r := range rows {
		if r.Attributes["pool"] == pool {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b fleet.Row) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func poolReady(pool string, want int, extra func(fleet.Row) bool) func(map[string]fleet.Row) bool {
	return func(rows map[string]fleet.Row) bool {
		ms := members(rows, pool)
		if len(ms) != want {
			return false
		}
		for _, m := range ms {
			if m.Phase != events.PhaseReady || (extra != nil && !extra(m)) {
				return false
			}
		}
		return true
	}
}

const poolHealth = `"healthCheck":{"intervalSeconds":1,"timeoutSeconds":1,"failureThreshold":2,"successThreshold":1}`

// A pool on the local provider, as the README's tour makes one: exactly its replicas,
// all Ready; a hand edit of a member is reverted and a key that only looks like a member is
// never touched; scaling down removes unleased members first; deleting the pool leaves no
// member and no process.
func TestPoolEndToEnd(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 26))
	w := watchPool(t, n, "web")
	n.nats("kv", "put", "proxies", "web-lookalike", `{"provider":"local",`+poolHealth+`}`)
	n.nats("kv", "put", "pools", "web", `{"template":{"provider":"local","attributes":{"geo":"de"},`+poolHealth+`},"replicas":10}`)
	rows := n.waitRows("10 Ready members", 60*time.Second, poolReady("web", 10, nil))
	for _, m := range members(rows, "web") {
		if !strings.HasPrefix(m.Name, "web-") || len(m.Name) != len("web-")+5 || m.Attributes["geo"] != "de" {
			t.Fatalf("member %s: %+v", m.Name, m.Attributes)
		}
	}
	ms := members(rows, "web")

	// An invalid pool creates nothing and says which field is wrong.
	n.nats("kv", "put", "pools", "bad", `{"template":{"provider":"local","mode":"external"},"replicas":-1}`)
	waitUntil(t, "the invalid pool shown Invalid", 20*time.Second, func() (bool, string) {
		out := n.egressd("status", "pools")
		return strings.Contains(out, "Invalid") && strings.Contains(out, "replicas") && strings.Contains(out, "template.mode"), out
	})
	if bad := members(n.rows(), "bad"); len(bad) != 0 {
		t.Fatalf("an invalid pool created %d members", len(bad))
	}
	n.nats("kv", "del", "-f", "pools", "bad")

	// A hand edit is reverted.
	edited := ms[0].Name
	n.nats("kv", "put", "proxies", edited, `{"provider":"local","pool":"web","maxLeases":7}`)
	waitUntil(t, "the hand edit reverted", 20*time.Second, func() (bool, string) {
		out := n.nats("kv", "get", "--raw", "proxies", edited)
		return strings.Contains(out, `"maxLeases":1`) && strings.Contains(out, `"geo":"de"`), out
	})
	if out := n.egressd("events", "--kind", "pool", "-f=false"); !strings.Contains(out, string(events.ReasonMemberReverted)) {
		t.Fatalf("no MemberReverted event:\n%s", out)
	}

	// Two members leased; replicas 4 removes 6 of the other 8.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	var leased []events.LeaseGrant
	for range 2 {
		r, raw := n.acquire(`{"selector":{"pool":"web"},"ttlSeconds":300,"holder":"e2e"}`)
		if r.Lease.ID == "" {
			t.Fatalf("acquire: %s", raw)
		}
		leased = append(leased, r.Lease)
	}
	n.nats("kv", "put", "pools", "web", `{"template":{"provider":"local","attributes":{"geo":"de"},`+poolHealth+`},"replicas":4}`)
	rows = n.waitRows("4 members left", 60*time.Second, func(r map[string]fleet.Row) bool { return len(members(r, "web")) == 4 })
	for _, l := range leased {
		if rows[l.Proxy].Phase != events.PhaseReady {
			t.Fatalf("leased member %s is %s after scaling down: unleased ones go first", l.Proxy, rows[l.Proxy].Phase)
		}
		if code := curlVia(t, l.URL, web.URL); code != "200" {
			t.Fatalf("curl through the leased %s: HTTP %s", l.Proxy, code)
		}
	}
	if highest, _ := w.stats(); highest > 11 {
		t.Fatalf("the pool had %d members at one point; replicas 10 + maxSurge 1", highest)
	}

	// Deleting the pool deletes every member; the look-alike stays, untouched.
	before := n.nats("kv", "get", "--raw", "proxies", "web-lookalike")
	n.nats("kv", "del", "-f", "pools", "web")
	n.waitRows("no member left", 60*time.Second, func(r map[string]fleet.Row) bool {
		_, ok := r["web-lookalike"]
		return len(members(r, "web")) == 0 && ok && len(r) == 1
	})
	if after := n.nats("kv", "get", "--raw", "proxies", "web-lookalike"); after != before {
		t.Fatalf("the look-alike was changed:\n%s\n%s", before, after)
	}
	waitUntil(t, "one forward proxy left (the look-alike's)", 30*time.Second, func() (bool, string) {
		p := proxyProcs(t, dir)
		return len(p) == 1, fmt.Sprint(p)
	})
	// The record stays a while as an empty tombstone (a late create of a stale controller is
	// then still deleted), and says so.
	if out := n.nats("kv", "ls", "pool_status"); strings.Contains(out, "web") {
		rec := n.nats("kv", "get", "--raw", "pool_status", "web")
		if !strings.Contains(rec, `"phase":"Deleting"`) || !strings.Contains(rec, `"members":[]`) {
			t.Fatalf("the pool's record outlived it as more than a tombstone: %s", rec)
		}
	}
}

// A full rotation (the template's port changes) with a leased member: every member gets a
// successor first; the leased one drains, never leased again while its lease keeps working
// through the proxy and renews, and goes only when released; Ready never drops below
// minAvailable. Then burned-address recycling: blocks on one target do not recycle a member,
// blocks on enough distinct targets do.
func TestPoolRotationNeverCutsALease(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 27))
	w := watchPool(t, n, "web")
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	pool := func(port int) string {
		return fmt.Sprintf(`{"template":{"provider":"local","port":%d,`+poolHealth+`},"replicas":3,`+
			`"rotation":{"maxSurge":2,"minAvailable":3,"drainTimeoutSeconds":600},"recycle":{"blockedTargets":2,"windowSeconds":600}}`, port)
	}
	n.nats("kv", "put", "pools", "web", pool(3128))
	n.waitRows("3 Ready members", 60*time.Second, poolReady("web", 3, nil))
	w.arm()
	r, raw := n.acquire(`{"selector":{"pool":"web"},"ttlSeconds":60,"holder":"e2e"}`)
	if r.Lease.ID == "" {
		t.Fatalf("acquire: %s", raw)
	}
	held := r.Lease

	n.nats("kv", "put", "pools", "web", pool(3129))
	rows := n.waitRows("3 new members Ready and the leased one draining", 90*time.Second, func(rows map[string]fleet.Row) bool {
		fresh := 0
		for _, m := range members(rows, "web") {
			if m.Phase == events.PhaseReady && strings.HasSuffix(m.Address, ":3129") {
				fresh++
			}
		}
		return fresh == 3 && rows[held.Proxy].Phase == events.PhaseDraining && len(members(rows, "web")) == 4
	})
	if code := curlVia(t, held.URL, web.URL); code != "200" {
		t.Fatalf("the drained member's lease stopped working: HTTP %s", code)
	}
	if out := n.nats("req", "--raw", "--timeout", "5s", events.LeaseRenewSubject, fmt.Sprintf(`{"id":%q,"ttlSeconds":60}`, held.ID)); !strings.Contains(out, held.ID) {
		t.Fatalf("renew on a draining member: %s", out)
	}
	for range 5 {
		if r, _ := n.acquire(`{"selector":{"pool":"web"},"ttlSeconds":5}`); r.Lease.Proxy == held.Proxy {
			t.Fatalf("the draining member %s was leased again", held.Proxy)
		} else if r.Lease.ID != "" {
			n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
		}
	}
	_ = rows
	n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, held.ID))
	n.waitRows("the drained member deleted once released", 30*time.Second, func(rows map[string]fleet.Row) bool {
		_, ok := rows[held.Proxy]
		return !ok && len(members(rows, "web")) == 3
	})
	if _, minReady := w.stats(); minReady < 3 {
		t.Fatalf("Ready fell to %d during the rotation; minAvailable is 3", minReady)
	}

	// Burned: two blocks on one target do not recycle; a block on a second target does.
	r, raw = n.acquire(`{"selector":{"pool":"web"},"ttlSeconds":60,"holder":"e2e"}`)
	if r.Lease.ID == "" {
		t.Fatalf("acquire: %s", raw)
	}
	burned := r.Lease.Proxy
	report := func(target string) {
		out := n.nats("req", "--raw", events.LeaseReportSubject, fmt.Sprintf(`{"id":%q,"result":"blocked","target":%q,"cooldownSeconds":1}`, r.Lease.ID, target))
		if !strings.Contains(out, "cooldownUntil") {
			t.Fatalf("report: %s", out)
		}
	}
	report("a.example")
	report("a.example")
	time.Sleep(3 * time.Second) // longer than a resync: a wrong recycle would have started
	if rows := n.rows(); rows[burned].Phase != events.PhaseReady {
		t.Fatalf("blocks on one target recycled %s: %s", burned, rows[burned].Phase)
	}
	report("b.example")
	n.waitRows("the burned member draining", 30*time.Second, func(rows map[string]fleet.Row) bool {
		return rows[burned].Phase == events.PhaseDraining
	})
	n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
	n.waitRows("the burned member replaced", 60*time.Second, func(rows map[string]fleet.Row) bool {
		_, ok := rows[burned]
		return !ok && poolReady("web", 3, nil)(rows)
	})
	if out := n.egressd("events", "--kind", "pool", "-f=false"); !strings.Contains(out, string(events.ReasonBurned)) || !strings.Contains(out, string(events.ReasonTemplateChanged)) {
		t.Fatalf("pool events lack Burned or TemplateChanged:\n%s", out)
	}
}
