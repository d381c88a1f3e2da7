package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go"
)

// BenchmarkLeaseAtScaleCluster is the lease benchmark in the production shape (issue 31 item
// 4): three nats-server processes as deployed (TLS, the deployed users and permissions,
// `egressd setup --replicas 3`), the service as three `egressd run --roles leaser`
// processes, 10,000 Ready proxies, 16 crawler connections (user crawler) spread over the
// servers, each running acquire and release cycles. Its floor in the same run is the same
// cycle's two KV writes and nothing else: kvstoretest.FloorService in this process as user
// leaser, answering on the lease subjects themselves (so the crawlers' connections and
// permissions are the service's), one Create and one Delete on the lease shards. CPU counts
// every process of the run (this one, the servers, the leasers) from /proc, so cpu/floor says
// what the service costs the machine beside what its writes cost.
func BenchmarkLeaseAtScaleCluster(b *testing.B) {
	const proxies, crawlers = 10_000, 16
	c := startCluster(b, clusterOptions{net: 43, noRoles: true})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	kvstoretest.SeedReadyFleet(b, c.jetStream(c.connect("admin")), proxies)
	clients := make([]*nats.Conn, crawlers)
	for i := range clients {
		clients[i] = c.connectTo("crawler", c.servers[i%len(c.servers)].clientURL)
	}
	lease := [2]string{events.LeaseAcquireSubject, events.LeaseReleaseSubject}

	var floor kvstoretest.Latencies
	b.Run("floor", func(b *testing.B) {
		nc := c.connectTo("leaser", c.servers[0].clientURL)
		shards, err := kvstore.OpenLeaseShards(ctx, c.jetStream(nc))
		if err != nil {
			b.Fatal(err)
		}
		svc, err := kvstoretest.FloorService(nc, lease, shards.ForKey)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = svc.Stop() }()
		kvstoretest.AwaitResponders(b, clients, lease[1], "floor-probe.0")
		floor = kvstoretest.RunClients(b, clients, c.cpu(b, nil), kvstoretest.FloorOp(lease))
		floor.Report(b)
	})
	var leasers []*node // started once: testing runs the function first with b.N = 1
	b.Run("acquire-release", func(b *testing.B) {
		for len(leasers) < 3 {
			leasers = append(leasers, c.startRole("leaser", "leaser", "--roles", "leaser"))
		}
		waitUntil(b, "three leasers serving 10,000 proxies", 3*time.Minute, func() (bool, string) {
			serving := 0
			for _, n := range leasers {
				if strings.Contains(n.logs(), "lease service started") {
					serving++
				}
			}
			return serving == len(leasers), fmt.Sprintf("%d of %d serving", serving, len(leasers))
		})
		kvstoretest.AwaitResponders(b, clients, lease[1], `{"id":"px-00000.0.x"}`)
		got := kvstoretest.RunClients(b, clients, c.cpu(b, leasers), func(nc *nats.Conn) error {
			m, err := nc.Request(lease[0], []byte(`{"ttlSeconds":60,"holder":"bench"}`), 10*time.Second)
			if err != nil {
				return err
			}
			var r events.LeaseReply
			if err := json.Unmarshal(m.Data, &r); err != nil || r.Lease.ID == "" {
				return fmt.Errorf("acquire: %s", m.Data)
			}
			return kvstoretest.Request(nc, lease[1], []byte(`{"id":"`+r.Lease.ID+`"}`))
		})
		got.Report(b)
		got.ReportAgainst(b, floor)
	})
}

// cpu counts the CPU time, user and system, of this process, the cluster's servers and
// roles.
func (c *cluster) cpu(b *testing.B, roles []*node) func() time.Duration {
	return func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		for _, s := range c.servers {
			total += procCPU(b, s.cmd.Process.Pid)
		}
		for _, n := range roles {
			total += procCPU(b, n.cmd.Process.Pid)
		}
		return total
	}
}

// procCPU is a process's user and system time from /proc/<pid>/stat (fields 14 and 15, in
// clock ticks of 1/100 s, Linux's USER_HZ).
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name in parentheses may hold spaces: the fields count from after it.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
