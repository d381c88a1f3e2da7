package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

// The rollout tests' local addresses are 127.0.54.x (one test at a time).
const rolloutNet = 54

// An edit of the cloud_init document a pool of 6 references rolls its members through the
// pool's rotation: at most maxSurge successors at a time, Ready never below minAvailable over
// every change the watch sees, and a leased member draining (its lease working through the
// proxy) until it is released. Before rollouts every member was rebuilt in place at once.
func TestPoolRollsAnEditedDocument(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, rolloutNet))
	w := watchPool(t, n, "docs")
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	n.nats("kv", "put", "cloud_init", "crawl", "#cloud-config\n# v1\n")
	n.nats("kv", "put", "pools", "docs", `{"template":{"provider":"local","cloudInitRef":"crawl",`+poolHealth+`},"replicas":6,`+
		`"rotation":{"maxSurge":2,"minAvailable":5,"drainTimeoutSeconds":600}}`)
	first := n.waitRows("6 Ready members", 90*time.Second, poolReady("docs", 6, nil))
	w.arm()
	r, raw := n.acquire(`{"selector":{"pool":"docs"},"ttlSeconds":120,"holder":"e2e"}`)
	if r.Lease.ID == "" {
		t.Fatalf("acquire: %s", raw)
	}
	held := r.Lease

	n.nats("kv", "put", "cloud_init", "crawl", "#cloud-config\n# v2\n")
	n.waitRows("6 new members Ready and the leased one draining", 180*time.Second, func(rows map[string]fleet.Row) bool {
		fresh := 0
		for _, m := range members(rows, "docs") {
			if _, old := first[m.Name]; !old && m.Phase == events.PhaseReady {
				fresh++
			}
		}
		return fresh == 6 && rows[held.Proxy].Phase == events.PhaseDraining
	})
	if code := curlVia(t, held.URL, web.URL); code != "200" {
		t.Fatalf("the leased member stopped serving before its lease was released: HTTP %s", code)
	}
	n.nats("req", "--raw", events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, held.ID))
	n.waitRows("the drained member deleted once released", 60*time.Second, func(rows map[string]fleet.Row) bool {
		_, ok := rows[held.Proxy]
		return !ok && poolReady("docs", 6, nil)(rows)
	})
	highest, minReady := w.stats()
	if highest > 6+2 {
		t.Fatalf("the pool had %d members at once: more than replicas + maxSurge (8)", highest)
	}
	if minReady < 5 {
		t.Fatalf("Ready fell to %d during the rollout; minAvailable is 5", minReady)
	}
	for name := range first {
		if _, ok := n.rows()[name]; ok {
			t.Fatalf("member %s built on the old document is still there", name)
		}
	}
}

// rolloutWatch follows proxy_status and keeps, over every change it sees, the most proxies
// of a set that were not Ready because of a rollout (their status carries one that drains or
// replaces), and the most not Ready at all once armed.
type rolloutWatch struct {
	mu       sync.Mutex
	set      map[string]bool
	notReady map[string]bool // not Ready, with a rollout under way
	worst    int
}

func watchRollout(t *testing.T, js jetstream.JetStream, set map[string]bool) *rolloutWatch {
	t.Helper()
	w := &rolloutWatch{set: set, notReady: map[string]bool{}}
	followBucket(t, js, events.BucketStatus, func(e jetstream.KeyValueEntry) {
		if !w.set[e.Key()] {
			return
		}
		var st events.ProxyStatus
		ok := e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &st) == nil
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.notReady, e.Key())
		// Not Ready because of the change: being drained, replaced, created or started
		// (Unhealthy alone is the probes' verdict on a running instance, unless its
		// rollout is under way).
		if ok && st.Phase != events.PhaseReady && (st.Phase != events.PhaseUnhealthy || st.Rollout != nil) {
			w.notReady[e.Key()] = true
		}
		w.worst = max(w.worst, len(w.notReady))
	})
	return w
}

func (w *rolloutWatch) most() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.worst
}

// Ten proxies of their own share a document; the provider's maxUnavailable is 2. Editing
// the document replaces every one of them, never more than 2 at once not Ready because of
// the rollout, and `egressd status rollouts` shows the progress.
func TestStandaloneRolloutBudget(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	cfg := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("providers:\n  - name: local\n    type: local\n    maxUnavailable: 2\n    local:\n      addresses: [127.0.%d.2-127.0.%d.250]\n", rolloutNet, rolloutNet)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, dir, "--config", cfg)
	n.nats("kv", "put", "cloud_init", "shared", "#cloud-config\n# v1\n")
	set := map[string]bool{}
	for i := range 10 {
		name := fmt.Sprintf("ro%d", i)
		set[name] = true
		n.nats("kv", "put", "proxies", name, `{"provider":"local","cloudInitRef":"shared",`+poolHealth+`}`)
	}
	allReady := func(rows map[string]fleet.Row) bool {
		for name := range set {
			if rows[name].Phase != events.PhaseReady {
				return false
			}
		}
		return true
	}
	n.waitRows("10 Ready", 90*time.Second, allReady)
	before := map[string]string{}
	_, js := n.client()
	for name := range set {
		var st events.ProxyStatus
		e, err := mustKV(t, js, events.BucketStatus).Get(context.Background(), name)
		if err != nil || json.Unmarshal(e.Value(), &st) != nil {
			t.Fatalf("status %s: %v", name, err)
		}
		before[name] = st.SpecHash
	}
	w := watchRollout(t, js, set)

	n.nats("kv", "put", "cloud_init", "shared", "#cloud-config\n# v2\n")
	sawProgress := false
	waitUntil(t, "every proxy rolled to the new document and Ready", 240*time.Second, func() (bool, string) {
		if out := n.egressd("status", "rollouts"); strings.Contains(out, "replaced") && strings.Contains(out, "provider local") {
			sawProgress = true
		}
		done := 0
		for name := range set {
			var st events.ProxyStatus
			e, err := mustKV(t, js, events.BucketStatus).Get(context.Background(), name)
			if err == nil && json.Unmarshal(e.Value(), &st) == nil && st.Phase == events.PhaseReady && st.Rollout == nil && st.SpecHash != before[name] {
				done++
			}
		}
		return done == len(set), fmt.Sprintf("%d of %d rolled", done, len(set))
	})
	if most := w.most(); most > 2 {
		t.Fatalf("%d proxies were not Ready because of the rollout at once; maxUnavailable is 2", most)
	}
	if w.most() == 0 {
		t.Fatal("the watch never saw a proxy in the rollout: nothing was measured")
	}
	if !sawProgress {
		t.Fatal("egressd status rollouts never showed the rollout's progress")
	}
}

func mustKV(t *testing.T, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
