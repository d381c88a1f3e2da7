package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// failoverClients is how many crawlers lease during a failover (issue 9: 16).
const failoverClients = 16

// failoverGapBound is the longest gap between successful acquires a kill may cause (issue
// 31). Measured 0.17–0.92 s (median 0.34 s) over 18 kills in docs/reliability.md's runs on
// the shared 2-core machine at a load average of 15–25, so load alone does not reach it;
// before shard health (decision 97) it was up to 6.6 s.
const failoverGapBound = 2 * time.Second

// The failover fleet: the lease shards are shaped so that one shard (bigShard) holds the
// only free slots whenever the crawlers are busy. Two small shards of 3 proxies with
// maxLeases 3 (18 slots) fill first, since the balanced order takes the proxies with the
// fewest leases; the big shard's 2 proxies with maxLeases 12 take the rest of the up to 32
// leases the crawlers want, and keep about 10 of their 24 slots free.
const (
	leaseShards             = 3 // setup --replicas 3
	bigShard                = 2
	smallProxies, smallCaps = 3, 3
	bigProxies, bigCaps     = 2, 12
)

// failoverFleet names the proxies of each shard and their caps.
func failoverFleet() map[string]int {
	caps := map[string]int{}
	count := make([]int, leaseShards)
	for i := 0; len(caps) < 2*smallProxies+bigProxies; i++ {
		name := fmt.Sprintf("lease-%d", i)
		s := events.LeaseShard(name, leaseShards)
		switch {
		case s == bigShard && count[s] < bigProxies:
			caps[name] = bigCaps
		case s != bigShard && count[s] < smallProxies:
			caps[name] = smallCaps
		default:
			continue
		}
		count[s]++
	}
	return caps
}

// Failover of a NATS server under lease load (issue 31): 16 crawlers lease continuously
// through the Go client while, in turn, the server leading the most lease shards, the server
// leading the shard that holds the only free slots, and the JetStream meta leader are killed
// -9 and restarted. No lease granted before a kill may be lost, no proxy may ever have more
// holders than its maxLeases, by the holders' own books and by the buckets, no call of the
// client may return a failure that another try could mend (it rides them out), and the
// longest gap between successful acquires stays below failoverGapBound. The gaps and
// latencies are printed (docs/reliability.md has the figures).
func TestClusterLeaseFailover(t *testing.T) {
	c := startCluster(t, clusterOptions{net: 41})
	caps := failoverFleet()
	var names []string
	for name, maxLeases := range caps {
		names = append(names, name)
		c.admin.nats("kv", "put", "proxies", name, fmt.Sprintf(`{"provider":"local","maxLeases":%d,"healthCheck":{"intervalSeconds":2}}`, maxLeases))
	}
	slices.Sort(names)
	c.admin.waitRows("the lease fleet Ready", 90*time.Second, allPhase(names, events.PhaseReady))

	admin := c.connect("admin")
	js := c.jetStream(admin)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	sw, watching := watchSlots(ctx, t, js, caps)
	ll := newLeaseLoad(caps, 30*time.Second)
	crawling := ll.run(ctx, c, failoverClients)
	defer crawling.Wait()

	leasePrefix := "KV_" + events.BucketLeases
	var figures []failoverFigures
	round := func(test string, pick func(leaders map[string]string) string) {
		baseFrom := time.Now()
		time.Sleep(6 * time.Second) // a baseline of the same run, before the kill
		_, leaders := c.busiestLeader(js, leasePrefix)
		_, all := c.busiestLeader(js, "KV_")
		victim := pick(leaders)
		var led []string
		for stream, l := range all {
			if l == victim {
				led = append(led, stream)
			}
		}
		slices.Sort(led)
		free := sw.freePerShard()
		s := c.server(victim)
		kill := time.Now()
		ll.markKill(kill)
		c.killServer(s)
		t.Logf("%s: killed %s at %s; lease shard leaders %v; it led %v; free slots per shard at the kill %v",
			test, victim, kill.Format("15:04:05.000"), leaders, led, free)
		time.Sleep(10 * time.Second) // down for longer than an election takes
		c.startServer(s)
		c.waitHealthy(s)
		healthy := time.Now()
		time.Sleep(3 * time.Second)
		end := time.Now()
		w, b := ll.window(kill, end), ll.window(baseFrom.Add(time.Second), kill)
		figures = append(figures, failoverFigures{Test: test, Killed: victim, LeadStreams: count(leaders, victim), Led: led, FreeAtKill: free,
			Clients: failoverClients, GapMs: ms(w.gap), BaselineGapMs: ms(b.gap), P50Ms: ms(w.p50), P99Ms: ms(w.p99), P99AllMs: ms(w.p99All),
			Failed: w.failed, Full: w.full, BaselineP50Ms: ms(b.p50), BaselineP99Ms: ms(b.p99), RecoveredMs: ms(healthy.Sub(kill))})
		t.Logf("%s: longest acquire gap %v (baseline %v)", test, w.gap.Round(time.Millisecond), b.gap.Round(time.Millisecond))
		// The survivors took over the killed server's leaders; once it is back and caught
		// up, the leading reconciler hands it one again, so the next crash stalls one shard.
		waitUntil(t, "the lease shards' leaders spread over the three servers again", time.Minute, func() (bool, string) {
			_, leaders := c.busiestLeader(js, leasePrefix)
			servers := map[string]bool{}
			for _, l := range leaders {
				servers[l] = true
			}
			return len(leaders) == leaseShards && len(servers) == leaseShards, fmt.Sprint(leaders)
		})
	}
	round("most-lease-shards-leader", func(leaders map[string]string) string {
		// Of the servers leading the most shards, one that does not lead the big shard: the
		// next round is that one's.
		counts := map[string]int{}
		for _, l := range leaders {
			counts[l]++
		}
		best := ""
		for l, n := range counts {
			if best == "" || n > counts[best] || n == counts[best] && leaders[shardStream(bigShard)] == best {
				best = l
			}
		}
		return best
	})
	round("free-slots-shard-leader", func(leaders map[string]string) string { return leaders[shardStream(bigShard)] })
	round("meta-leader", func(map[string]string) string { return c.metaLeader() })
	stop()
	crawling.Wait()
	watching.Wait()

	lost, checked := judgeLeases(t, ll, sw)
	visible := ll.visibleErrors(t)
	ll.mu.Lock()
	defer ll.mu.Unlock()
	sw.mu.Lock()
	defer sw.mu.Unlock()
	acquires := 0
	for _, s := range ll.samples {
		if s.ok {
			acquires++
		}
	}
	for _, f := range figures {
		f.Acquires, f.CheckedAcrossKill, f.Lost, f.Unsettled, f.VisibleErrors = acquires, checked, lost, ll.unsettle, visible
		f.OverCapHolders, f.OverCapBucket = len(ll.overCap), len(sw.overCap)
		t.Logf("%s: killed %s (led %d lease streams); longest acquire gap %.0f ms (baseline %.0f ms); acquire p50 %.1f ms p99 %.1f ms (baseline %.1f / %.1f ms), p99 of every attempt %.0f ms, %d failed, %d refused as full; healthy again %.1f s after the kill; %d acquires, %d leases checked across kills, %d lost, %d unsettled, over cap %d (holders) %d (buckets), %d caller-visible errors",
			f.Test, f.Killed, f.LeadStreams, f.GapMs, f.BaselineGapMs, f.P50Ms, f.P99Ms, f.BaselineP50Ms, f.BaselineP99Ms,
			f.P99AllMs, f.Failed, f.Full, f.RecoveredMs/1000, f.Acquires, f.CheckedAcrossKill, f.Lost, f.Unsettled, f.OverCapHolders, f.OverCapBucket, f.VisibleErrors)
		b, _ := json.Marshal(f)
		t.Logf("RELIABILITY %s", b)
		if gap := time.Duration(f.GapMs * float64(time.Millisecond)); gap >= failoverGapBound {
			t.Errorf("%s: the longest gap between successful acquires was %v, want below %v", f.Test, gap.Round(time.Millisecond), failoverGapBound)
		}
	}
}

// shardStream is the stream of lease shard i.
func shardStream(i int) string { return "KV_" + events.LeaseBucket(i) }

// freePerShard is how many slots of the fleet are free in each lease shard now, by the
// buckets.
func (sw *slotWatch) freePerShard() []int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	free := make([]int, leaseShards)
	for proxy, max := range sw.max {
		free[events.LeaseShard(proxy, leaseShards)] += max - len(sw.live[proxy])
	}
	return free
}

func count(m map[string]string, v string) int {
	n := 0
	for _, x := range m {
		if x == v {
			n++
		}
	}
	return n
}
