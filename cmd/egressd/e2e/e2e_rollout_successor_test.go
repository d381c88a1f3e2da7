package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// soloSpec is a proxy of its own on the local provider built from the cloud_init document
// "solo", leased by the selector {"roll":"solo"}, with the lease's own credentials. Its
// leases are counted against maxLeases whichever instance they are on, so 2 lets a second
// lease go to the successor while the first is held on the retiring instance.
const soloSpec = `{"provider":"local","cloudInitRef":"solo","maxLeases":2,"attributes":{"roll":"solo"},"auth":{"mode":"lease"},` + poolHealth + `}`

// statusOf reads name's status; ok is false while it has none.
func statusOf(t *testing.T, js jetstream.JetStream, name string) (events.ProxyStatus, bool) {
	t.Helper()
	var st events.ProxyStatus
	e, err := mustKV(t, js, events.BucketStatus).Get(context.Background(), name)
	if err != nil || json.Unmarshal(e.Value(), &st) != nil {
		return st, false
	}
	return st, true
}

// hostOf is the host:port of a lease URL.
func hostOf(t *testing.T, leaseURL string) string {
	t.Helper()
	u, err := url.Parse(leaseURL)
	if err != nil {
		t.Fatalf("lease URL %q: %v", leaseURL, err)
	}
	return u.Host
}

// retiringOn is the condition "the status describes a successor, the instance named first
// retiring".
func retiringOn(st events.ProxyStatus, first string) bool {
	return st.Rollout != nil && st.Rollout.Stage == events.RolloutRetiring && st.InstanceName != first &&
		slices.ContainsFunc(st.Retiring, func(r events.InstanceRef) bool { return r.Name == first })
}

// A proxy of its own with a held lease, whose cloud_init document is edited, is rolled
// successor first (decision 98): a successor is built beside its instance and the status
// switches to it; new acquires get the successor; the held lease keeps working through the
// old instance, renews, and is never ended by the rollout (there is no drain timeout any
// more: the old instance stays as long as the lease does); once released, the old instance
// is deleted (its forward-proxy process gone) and the proxy is Ready on the new one, with the
// event RolloutReplaced. Before, the proxy drained (no new lease), then the lease was cut at
// the 15-minute drain timeout and the proxy rebuilt under the same name.
func TestStandaloneRollsSuccessorFirst(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, rolloutNet))
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	_, js := n.client()
	n.nats("kv", "put", "cloud_init", "solo", "#cloud-config\n# v1\n")
	n.nats("kv", "put", "proxies", "solo", soloSpec)
	rows := n.waitRows("solo Ready", 90*time.Second, readyOrFail(t, "solo", nil))
	first := rows["solo"].Status
	r, raw := n.acquire(`{"selector":{"roll":"solo"},"ttlSeconds":120,"holder":"e2e"}`)
	if r.Lease.ID == "" {
		t.Fatalf("acquire: %s", raw)
	}
	held := r.Lease
	if hostOf(t, held.URL) != first.Address() {
		t.Fatalf("the lease's URL %s is not the instance's address %s", held.URL, first.Address())
	}

	edited := time.Now()
	n.nats("kv", "put", "cloud_init", "solo", "#cloud-config\n# v2\n")
	var switched events.ProxyStatus
	waitUntil(t, "the status switched to a successor, the first instance retiring, Ready", 90*time.Second, func() (bool, string) {
		st, _ := statusOf(t, js, "solo")
		switched = st
		return retiringOn(st, first.InstanceName) && st.Phase == events.PhaseReady, fmt.Sprintf("%s %+v %s", st.Phase, st.Rollout, st.InstanceName)
	})
	toReady := time.Since(edited)
	if switched.Address() == first.Address() {
		t.Fatalf("the successor has the first instance's address %s", first.Address())
	}
	procs := proxyProcsByInstance(t, dir)
	if procs[first.InstanceName] != 1 || procs[switched.InstanceName] != 1 {
		t.Fatalf("forward proxies by instance %v: want the first and the successor running", procs)
	}
	next, raw := n.acquire(`{"selector":{"roll":"solo"},"ttlSeconds":30,"holder":"e2e-2"}`)
	if next.Lease.ID == "" || hostOf(t, next.Lease.URL) != switched.Address() {
		t.Fatalf("a new acquire did not get the successor %s: %s", switched.Address(), raw)
	}
	if code := curlVia(t, next.Lease.URL, web.URL); code != "200" {
		t.Fatalf("the new lease through the successor: HTTP %s", code)
	}
	n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, next.Lease.ID))

	// The held lease runs on through the old instance with its credentials (and only with
	// them), renewal after renewal, each time after the reconciler counted it on the old
	// instance and kept that: nothing times it out (Policy has no drain timeout any more).
	if code := curlVia(t, "http://"+first.Address(), web.URL); code != "407" {
		t.Fatalf("the retiring instance without credentials: HTTP %s, want 407", code)
	}
	for i := range 3 {
		waitUntil(t, "the reconciler counted the held lease on the retiring instance", 30*time.Second, func() (bool, string) {
			st, _ := statusOf(t, js, "solo")
			return retiringOn(st, first.InstanceName) && strings.Contains(st.Message, "(1 leases run on)"), st.Message
		})
		if code := curlVia(t, held.URL, web.URL); code != "200" {
			t.Fatalf("round %d: the held lease through the retiring instance: HTTP %s", i, code)
		}
		out := n.nats("req", "--raw", "--timeout", "5s", events.LeaseRenewSubject, fmt.Sprintf(`{"id":%q,"ttlSeconds":120}`, held.ID))
		if !strings.Contains(out, held.ID) {
			t.Fatalf("round %d: renew of the held lease: %s", i, out)
		}
	}
	if dialable(first.Address()) != nil {
		t.Fatalf("the retiring instance %s stopped listening while its lease is held", first.Address())
	}

	released := time.Now()
	n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, held.ID))
	waitUntil(t, "the first instance deleted once its lease was released; Ready on the successor", 60*time.Second, func() (bool, string) {
		st, _ := statusOf(t, js, "solo")
		procs := proxyProcsByInstance(t, dir)
		return st.Phase == events.PhaseReady && st.Rollout == nil && len(st.Retiring) == 0 && st.Successor == nil &&
				st.InstanceName == switched.InstanceName && procs[first.InstanceName] == 0 && procs[switched.InstanceName] == 1,
			fmt.Sprintf("%s rollout %+v retiring %d procs %v", st.Phase, st.Rollout, len(st.Retiring), procs)
	})
	t.Logf("edit -> Ready on the successor %.2f s; release -> old instance gone and rollout done %.2f s",
		toReady.Seconds(), time.Since(released).Seconds())
	if n := len(proxyProcs(t, dir)); n != 1 {
		t.Fatalf("%d forward-proxy processes, want 1", n)
	}
	for _, ev := range readEvents(t, js, events.EventSubject(events.KindLease, "solo")) {
		if ev.Reason == events.ReasonProxyReplaced || ev.Reason == events.ReasonProxyDeleted {
			t.Fatalf("a lease was ended by the rollout: %+v", ev)
		}
	}
	replaced := false
	for _, ev := range readEvents(t, js, events.EventSubject(events.KindPhase, "solo")) {
		replaced = replaced || ev.Reason == events.ReasonRolloutReplaced
	}
	if !replaced {
		t.Fatal("no RolloutReplaced event")
	}
}

// dialable is nil when something accepts TCP connections at addr.
func dialable(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}
