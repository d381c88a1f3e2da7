package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

// chaosSize is how big a chaos run is: `make chaos` (EGRESSD_CHAOS=full) runs issue 9's
// figures, CI (the default) a shorter run of the same test.
type chaosSize struct {
	Proxies, Changes, RoleKills, NATSKillEvery int
	Change                                     time.Duration // between lifecycle changes
}

// chaosSeed seeds the run's choices (changes, victims, pauses): EGRESSD_CHAOS_SEED repeats
// a run's choices, otherwise every run makes new ones. Either way the test prints it.
func chaosSeed(t *testing.T) uint64 {
	if s := os.Getenv("EGRESSD_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EGRESSD_CHAOS_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

func chaosSizeFromEnv() (chaosSize, string) {
	if os.Getenv("EGRESSD_CHAOS") == "full" {
		return chaosSize{Proxies: 50, Changes: 500, RoleKills: 100, NATSKillEvery: 20, Change: 300 * time.Millisecond}, "full"
	}
	return chaosSize{Proxies: 12, Changes: 60, RoleKills: 20, NATSKillEvery: 10, Change: 400 * time.Millisecond}, "ci"
}

// chaosFigures are what a chaos run printed.
type chaosFigures struct {
	Test        string         `json:"test"`
	Size        string         `json:"size"`
	Seed        uint64         `json:"seed"`
	Proxies     int            `json:"proxies"`
	Changes     int            `json:"changes"` // creates, port changes and deletes applied
	ByChange    map[string]int `json:"byChange"`
	RoleKills   int            `json:"roleKills"`
	ByRole      map[string]int `json:"byRole"`
	NATSKills   int            `json:"natsKills"`
	Live        int            `json:"live"`    // proxies that exist at the end
	Orphans     int            `json:"orphans"` // instances the orphan GC deleted
	Acquires    int            `json:"acquires"`
	OverCap     int            `json:"overCap"`
	ConvergedMs int64          `json:"convergedMs"` // from the last kill to every proxy converged
	CleanMs     int64          `json:"cleanMs"`     // from the last kill to no instance left over
	ChaosMs     int64          `json:"chaosMs"`
}

// Chaos across roles: lifecycle changes (create, port change, delete) on a fleet while a
// driver kills -9 a random role process (and every so often a NATS server) and restarts it.
// At the end every proxy has converged to its last spec, each live proxy has exactly one
// forward-proxy process and instance directory, deleted ones have none once GC has run, no
// lease bucket ever held more slots for a proxy than its maxLeases, and no slot of a missing
// proxy outlives its TTL.
func TestClusterChaos(t *testing.T) {
	size, sizeName := chaosSizeFromEnv()
	seed := chaosSeed(t)
	t.Logf("chaos seed %d (EGRESSD_CHAOS_SEED repeats its choices)", seed)
	c := startCluster(t, clusterOptions{net: 43, extra: []string{"--gc-interval", "5s", "--gc-min-age", "10s"}})
	admin := c.connect("admin")
	js := c.jetStream(admin)
	proxies, err := js.KeyValue(t.Context(), events.BucketProxies)
	if err != nil {
		t.Fatal(err)
	}
	const maxLeases = 2
	leaseTTL := 10 * time.Second
	caps := map[string]int{}
	var names []string
	for i := range size.Proxies {
		names = append(names, fmt.Sprintf("chaos-%02d", i))
		caps[names[i]] = maxLeases
	}

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	sw, watching := watchSlots(ctx, t, js, caps)
	ll := newLeaseLoad(caps, leaseTTL)
	ll.churn = true
	crawling := ll.run(ctx, c, 4)

	// The lifecycle driver: each change is applied (retried through NATS failovers) before
	// the next; desired is what the fleet must converge to.
	desired := map[string]int{} // name → port, for the live ones
	byChange := map[string]int{}
	var lifeMu sync.Mutex
	var lifeErr error
	lifeDone := make(chan struct{})
	go func() {
		defer close(lifeDone)
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := 0; i < size.Changes && ctx.Err() == nil; i++ {
			name := names[rng.IntN(len(names))]
			lifeMu.Lock()
			port, live := desired[name]
			lifeMu.Unlock()
			kind := "create"
			newPort := 3100 + rng.IntN(40)
			switch {
			case !live:
			case rng.IntN(5) < 3:
				kind = "port"
				for newPort == port {
					newPort = 3100 + rng.IntN(40)
				}
			default:
				kind = "delete"
			}
			if err := applyChange(ctx, proxies, name, kind, newPort, maxLeases); err != nil {
				lifeMu.Lock()
				lifeErr = fmt.Errorf("%s %s: %w", kind, name, err)
				lifeMu.Unlock()
				return
			}
			lifeMu.Lock()
			if kind == "delete" {
				delete(desired, name)
			} else {
				desired[name] = newPort
			}
			byChange[kind]++
			lifeMu.Unlock()
			sleepCtx(ctx, size.Change)
		}
	}()

	// The kill driver.
	type roleProc struct {
		role string
		n    *node
	}
	var procs []roleProc
	for _, r := range clusterRoles { // in a fixed order, so a seed repeats its victims
		for _, n := range c.roles[r.role] {
			procs = append(procs, roleProc{r.role, n})
		}
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	byRole := map[string]int{}
	roleKills, natsKills := 0, 0
	begin := time.Now()
	for roleKills < size.RoleKills || !closed(lifeDone) {
		if roleKills > 0 && roleKills%size.NATSKillEvery == 0 && natsKills < roleKills/size.NATSKillEvery {
			s := c.servers[rng.IntN(len(c.servers))]
			c.killServer(s)
			natsKills++
			sleepCtx(ctx, time.Duration(2000+rng.IntN(3000))*time.Millisecond)
			c.startServer(s)
			c.waitHealthy(s)
			continue
		}
		p := procs[rng.IntN(len(procs))]
		p.n.kill9()
		roleKills++
		byRole[p.role]++
		sleepCtx(ctx, time.Duration(rng.IntN(1500))*time.Millisecond)
		p.n.start()
	}
	lastKill := time.Now()
	<-lifeDone
	if lifeErr != nil {
		t.Fatal(lifeErr)
	}
	t.Logf("chaos over after %.1f s: %d role kills %v, %d NATS kills, changes %v", lastKill.Sub(begin).Seconds(),
		roleKills, byRole, natsKills, byChange)

	// Converged: every live proxy Ready at its last port, every deleted one gone. Until then
	// the wait names what is off, with the spec in KV and what the status says of it (a
	// failure on 2026-12-04 left one proxy Ready on its previous port with no reason).
	var rows map[string]fleet.Row
	waitUntil(t, "every proxy converged", 5*time.Minute, func() (bool, string) {
		rows = c.admin.rows()
		off := notConverged(t.Context(), proxies, rows, desired)
		return len(off) == 0, strings.Join(off, "; ")
	})
	converged := time.Since(lastKill)
	// Exactly one instance per live proxy; none of deleted ones once GC has run.
	waitUntil(t, "exactly one instance per live proxy and no other", 3*time.Minute, func() (bool, string) {
		per := proxyProcsByInstance(t, c.dir)
		total := 0
		for _, n := range per {
			total += n
		}
		for name := range desired {
			if per[rows[name].Status.InstanceName] != 1 {
				return false, fmt.Sprintf("%s: %d processes", name, per[rows[name].Status.InstanceName])
			}
		}
		dirs := instanceDirs(t, c.dataDir())
		return total == len(desired) && dirs == len(desired), fmt.Sprintf("%d processes, %d directories, %d live proxies", total, dirs, len(desired))
	})
	clean := time.Since(lastKill)
	stop()
	crawling.Wait()
	watching.Wait()

	// Leases: never over cap in the buckets; no slot of a missing proxy past its TTL.
	sw.mu.Lock()
	for _, o := range sw.overCap {
		t.Errorf("over cap in the lease buckets: %s", o)
	}
	for _, err := range sw.errs {
		t.Errorf("lease bucket: %v", err)
	}
	sw.mu.Unlock()
	waitUntil(t, "no slot of a missing proxy past its TTL", leaseTTL+30*time.Second, func() (bool, string) {
		stale := staleSlots(t, js, desired)
		return len(stale) == 0, strings.Join(stale, ", ")
	})

	orphans := len(readEvents(t, js, events.EventSubject(events.KindGC, ">")))
	acquires := 0
	ll.mu.Lock()
	for _, s := range ll.samples {
		if s.ok {
			acquires++
		}
	}
	ll.mu.Unlock()
	f := chaosFigures{Test: "chaos", Size: sizeName, Seed: seed, Proxies: size.Proxies, ByChange: byChange, RoleKills: roleKills,
		ByRole: byRole, NATSKills: natsKills, Live: len(desired), Orphans: orphans, Acquires: acquires, OverCap: len(sw.overCap),
		ConvergedMs: converged.Milliseconds(), CleanMs: clean.Milliseconds(), ChaosMs: lastKill.Sub(begin).Milliseconds()}
	for _, n := range byChange {
		f.Changes += n
	}
	t.Logf("%s chaos: %d changes %v on %d proxies, %d role kills %v, %d NATS kills in %.0f s; converged %.1f s and clean %.1f s after the last kill; %d live; %d orphans collected; %d acquires, %d over cap",
		sizeName, f.Changes, byChange, f.Proxies, roleKills, byRole, natsKills, float64(f.ChaosMs)/1000,
		float64(f.ConvergedMs)/1000, float64(f.CleanMs)/1000, f.Live, orphans, acquires, f.OverCap)
	b, _ := json.Marshal(f)
	t.Logf("RELIABILITY %s", b)
}

// notConverged lists what differs from desired (name → port): a proxy not Ready at its
// port, with its spec in KV and its status's reason, spec revision and rollout; a row of a
// proxy that should be gone.
func notConverged(ctx context.Context, kv jetstream.KeyValue, rows map[string]fleet.Row, desired map[string]int) []string {
	var off []string
	for name, port := range desired {
		row := rows[name]
		if row.Phase == events.PhaseReady && strings.HasSuffix(row.Address, fmt.Sprintf(":%d", port)) {
			continue
		}
		spec := "unreadable"
		if e, err := kv.Get(ctx, name); err == nil {
			spec = fmt.Sprintf("%s at revision %d", e.Value(), e.Revision())
		}
		st := row.Status
		if st == nil {
			st = &events.ProxyStatus{}
		}
		off = append(off, fmt.Sprintf("%s wants port %d: %s %s reason %q %q; status of spec revision %d, hash %s, rollout %+v, successor %+v, op %+v; spec in KV %s",
			name, port, row.Phase, row.Address, row.Reason, st.Message, st.SpecRevision, st.SpecHash, st.Rollout, st.Successor, st.Op, spec))
	}
	for name := range rows {
		if _, ok := desired[name]; !ok {
			off = append(off, name+" should be gone: "+string(rows[name].Phase))
		}
	}
	slices.Sort(off)
	return off
}

// applyChange writes one lifecycle change, retrying while the cluster fails over.
func applyChange(ctx context.Context, kv jetstream.KeyValue, name, kind string, port, maxLeases int) error {
	var err error
	for range 30 {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if kind == "delete" {
			err = kv.Delete(cctx, name)
		} else {
			_, err = kv.Put(cctx, name, fmt.Appendf(nil, `{"provider":"local","port":%d,"maxLeases":%d,"healthCheck":{"intervalSeconds":2}}`, port, maxLeases))
		}
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	return err
}

// staleSlots lists the slots, in every lease bucket, of proxies that no longer exist and
// whose lease has expired.
func staleSlots(t *testing.T, js jetstream.JetStream, live map[string]int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	leaders, err := streamLeaders(ctx, js, "KV_"+events.BucketLeases)
	if err != nil {
		return []string{err.Error()}
	}
	var stale []string
	for stream := range leaders {
		kv, err := js.KeyValue(ctx, strings.TrimPrefix(stream, "KV_"))
		if err != nil {
			return []string{err.Error()}
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return []string{err.Error()}
		}
		for key := range keys.Keys() {
			proxy, _, _ := strings.Cut(key, ".")
			if _, ok := live[proxy]; ok {
				continue
			}
			e, err := kv.Get(ctx, key)
			if err != nil {
				continue // gone since the listing
			}
			var l events.Lease
			if json.Unmarshal(e.Value(), &l) == nil && time.Now().After(l.ExpiresAt) {
				stale = append(stale, stream+"/"+key)
			}
		}
	}
	return stale
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
