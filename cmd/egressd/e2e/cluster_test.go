package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
)

// The harness itself: the deployed cluster config on three real servers, every role its own
// process and user; a proxy converges, is probed Ready, is leased through the crawler user,
// and goes away with its spec.
func TestClusterRoles(t *testing.T) {
	c := startCluster(t, clusterOptions{net: 40})
	js := c.jetStream(c.connect("admin"))
	// Every bucket and stream setup declared is replicated on all three servers.
	leaders, err := streamLeaders(t.Context(), js, "")
	if err != nil || len(leaders) < 11 {
		t.Fatalf("streams: %v, %v", leaders, err)
	}
	for name := range leaders {
		s, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if cl := s.CachedInfo().Cluster; cl == nil || cl.Leader == "" || len(cl.Replicas) != 2 {
			t.Fatalf("%s is not R3 with a leader: %+v", name, cl)
		}
	}
	// With lease-bound credentials, so that each role's use of the lease master runs under
	// its user: the provisioner delivers the key, the prober passes on its own token (px
	// turns Ready), the leaser signs the crawler's.
	c.admin.nats("kv", "put", "proxies", "px", `{"provider":"local","auth":{"mode":"lease"},"healthCheck":{"intervalSeconds":1}}`)
	c.admin.waitRows("px Ready", 60*time.Second, allPhase([]string{"px"}, events.PhaseReady))
	nc := c.connect("crawler")
	g, err := client.New(nc).AcquireOnce(t.Context(), client.AcquireOptions{TTL: 30 * time.Second, Holder: "harness"})
	if err != nil || g.Proxy != "px" {
		t.Fatalf("acquire as crawler: %+v, %v", g, err)
	}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer web.Close()
	if code := curlVia(t, g.URL, web.URL); code != "200" {
		t.Fatalf("the crawler's lease URL through px: HTTP %s", code)
	}
	c.admin.nats("kv", "del", "-f", "proxies", "px")
	c.admin.waitRows("px gone", 60*time.Second, func(r map[string]fleet.Row) bool { return len(r) == 0 })
	if pids := proxyProcs(t, c.dir); len(pids) != 0 {
		t.Fatalf("forward proxies left: %v", pids)
	}
	// Each role did its job with its own user's rights alone.
	for _, s := range c.servers {
		if v := strings.Count(s.log.logs(), "Permissions Violation"); v != 0 {
			t.Errorf("%s logged %d permission violations:\n%s", s.name, v, tail(s.log.logs(), 3000))
		}
	}
}
