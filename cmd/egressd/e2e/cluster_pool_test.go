package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// Kill -9 of the process running the pool controller, 20 times at random moments, on the
// production cluster (three nats-servers, roles under their own users), while a pool of 20
// scales up, rotates every member (a template change) and scales down to 5: at no
// observation has the pool more members than replicas + maxSurge, no member ever has two
// instances, and it converges to exactly its members, one forward proxy each.
func TestClusterPoolChaos(t *testing.T) {
	c := startCluster(t, clusterOptions{net: 44, leaderTTL: "2s"})
	js := c.jetStream(c.connect("admin"))
	ctx := t.Context()
	locks, err := js.KeyValue(ctx, events.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := js.KeyValue(ctx, events.BucketPools)
	if err != nil {
		t.Fatal(err)
	}
	// Every change of proxies, as it happens: the most members the pool ever had.
	w := watchPoolJS(t, js, "fleet")
	count := w.count

	spec := func(replicas, port int) []byte {
		return fmt.Appendf(nil, `{"template":{"provider":"local","port":%d,"healthCheck":{"intervalSeconds":2}},"replicas":%d,`+
			`"rotation":{"maxSurge":2,"drainTimeoutSeconds":30}}`, port, replicas)
	}

	// The kills run beside the whole scenario; each waits for the controller to lead again,
	// so that every kill lands on a live controller at a random point of its work.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 44))
	var kills atomic.Int32
	stopChaos := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		for kills.Load() < 20 {
			select {
			case <-stopChaos:
				return
			case <-time.After(time.Duration(300+rng.IntN(2200)) * time.Millisecond):
			}
			leader := c.leaderOf(locks, events.LockLeaderPools, nil)
			leader.kill9()
			kills.Add(1)
			leader.start()
		}
	})
	defer func() { close(stopChaos); chaos.Wait() }()

	if _, err := pools.Put(ctx, "fleet", spec(20, 3128)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "20 members", 2*time.Minute, func() (bool, string) { return count() == 20, fmt.Sprint(count()) })
	c.admin.waitRows("the 20 Ready", 3*time.Minute, poolReady("fleet", 20, nil))
	if _, err := pools.Put(ctx, "fleet", spec(20, 3129)); err != nil {
		t.Fatal(err)
	}
	c.admin.waitRows("a full rotation to port 3129", 4*time.Minute, poolReady("fleet", 20, func(r fleet.Row) bool {
		return strings.HasSuffix(r.Address, ":3129")
	}))
	if _, err := pools.Put(ctx, "fleet", spec(5, 3129)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "all 20 kills", 3*time.Minute, func() (bool, string) { return kills.Load() >= 20, fmt.Sprint(kills.Load()) })
	rows := c.admin.waitRows("5 Ready members, nothing else", 3*time.Minute, func(r map[string]fleet.Row) bool {
		return poolReady("fleet", 5, nil)(r) && len(r) == 5
	})
	waitUntil(t, "exactly one forward proxy per member", 2*time.Minute, func() (bool, string) {
		per := proxyProcsByInstance(t, c.dir)
		for _, m := range members(rows, "fleet") {
			if per[m.Status.InstanceName] != 1 {
				return false, fmt.Sprintf("%s: %d processes", m.Name, per[m.Status.InstanceName])
			}
		}
		n := len(proxyProcs(t, c.dir))
		return n == 5, fmt.Sprintf("%d forward proxies", n)
	})
	top, _ := w.stats()
	t.Logf("RELIABILITY {\"test\":\"pool-chaos\",\"kills\":%d,\"highestMembers\":%d,\"cap\":22}", kills.Load(), top)
	if top > 22 {
		t.Fatalf("the pool had %d members at one point; replicas 20 + maxSurge 2", top)
	}
}
