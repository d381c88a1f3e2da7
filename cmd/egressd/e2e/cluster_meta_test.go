package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testcert"
	"github.com/nats-io/nats.go/jetstream"
)

// What the cluster tests read of the servers themselves: the JetStream meta leader, stream
// leaders, and the TLS and ports the harness gives them.

// metaCluster is the part of a server's /jsz that names the meta leader and its peers.
type metaCluster struct {
	Leader   string `json:"leader"`
	Size     int    `json:"cluster_size"`
	Replicas []struct {
		Name    string `json:"name"`
		Current bool   `json:"current"`
		Offline bool   `json:"offline"`
	} `json:"replicas"`
}

// meta reads the meta cluster as server s sees it.
func (s *natsProc) meta() (metaCluster, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(s.monitorURL + "/jsz")
	if err != nil {
		return metaCluster{}, err
	}
	defer resp.Body.Close()
	var jsz struct {
		Meta metaCluster `json:"meta_cluster"`
	}
	err = json.NewDecoder(resp.Body).Decode(&jsz)
	return jsz.Meta, err
}

// metaLeader is the JetStream meta leader as a live server's /jsz reports it.
func (c *cluster) metaLeader() string {
	c.t.Helper()
	var leader string
	waitUntil(c.t, "a meta leader", 60*time.Second, func() (bool, string) {
		for _, s := range c.servers {
			if m, err := s.meta(); err == nil && m.Leader != "" {
				leader = m.Leader
				return true, ""
			}
		}
		return false, "no server names a meta leader"
	})
	return leader
}

// waitMetaComplete waits until the meta leader sees both other servers online and current:
// until then a stream of three replicas finds no place ("no suitable peers for placement"),
// even though every server's /healthz is already fine.
func (c *cluster) waitMetaComplete() {
	c.t.Helper()
	waitUntil(c.t, "the meta leader to see all three servers", 90*time.Second, func() (bool, string) {
		m, err := c.server(c.metaLeader()).meta()
		if err != nil {
			return false, err.Error()
		}
		if m.Size != 3 || len(m.Replicas) != 2 {
			return false, fmt.Sprintf("%+v", m)
		}
		for _, r := range m.Replicas {
			if !r.Current || r.Offline {
				return false, fmt.Sprintf("%+v", m)
			}
		}
		return true, ""
	})
}

// streamLeaders maps each stream whose name starts with prefix to its leader, read from
// $JS.API.STREAM.INFO.<stream> (cluster.leader) over js.
func streamLeaders(ctx context.Context, js jetstream.JetStream, prefix string) (map[string]string, error) {
	leaders := map[string]string{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if strings.HasPrefix(name, prefix) {
			leaders[name] = ""
		}
	}
	if err := names.Err(); err != nil {
		return nil, err
	}
	for name := range leaders {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("stream info %s: %w", name, err)
		}
		if cl := s.CachedInfo().Cluster; cl != nil {
			leaders[name] = cl.Leader
		}
	}
	return leaders, nil
}

// busiestLeader is the server leading the most of the streams named prefix…, and how many
// it leads: the lease slots may be sharded over several buckets, and this works for one or
// many.
func (c *cluster) busiestLeader(js jetstream.JetStream, prefix string) (string, map[string]string) {
	c.t.Helper()
	var leaders map[string]string
	waitUntil(c.t, "leaders of "+prefix+"*", 60*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		leaders, err = streamLeaders(ctx, js, prefix)
		if err != nil {
			return false, err.Error()
		}
		for _, l := range leaders {
			if l == "" {
				return false, fmt.Sprint(leaders)
			}
		}
		return len(leaders) > 0, "no such stream"
	})
	count := map[string]int{}
	best := ""
	for _, l := range leaders {
		count[l]++
		if best == "" || count[l] > count[best] || count[l] == count[best] && l < best {
			best = l
		}
	}
	return best, leaders
}

// writeTLS writes the CA and the certificate the servers' client and route TLS use.
func (c *cluster) writeTLS() {
	c.t.Helper()
	dir := filepath.Join(c.dir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	f, err := testcert.Write(dir)
	if err != nil {
		c.t.Fatal(err)
	}
	c.caFile = f.CA
	c.env = append(c.env, "EGRESSD_NATS_TLS_CERT="+f.Cert, "EGRESSD_NATS_TLS_KEY="+f.Key, "EGRESSD_NATS_TLS_CA="+f.CA)
}

// reservePorts picks n free loopback ports below the kernel's ephemeral range: a server
// restarted after a kill -9 gets its ports back, since no bind(0) or outgoing connection
// of another process is ever handed one of them meanwhile.
func reservePorts(t testing.TB, n int) []int {
	t.Helper()
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				lo = v
			}
		}
	}
	if lo <= 12000 {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for the cluster's ports", lo)
	}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatal("no free loopback ports below the ephemeral range")
		}
		p := 10000 + rand.IntN(lo-10000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		defer l.Close()
		ports = append(ports, p)
	}
	return ports
}
