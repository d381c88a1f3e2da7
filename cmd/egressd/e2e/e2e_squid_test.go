package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// proxyHealth reads a proxy's health record with the real nats CLI; ok is false while there
// is none.
func (n *node) proxyHealth(proxy string) (h events.ProxyHealth, ok bool) {
	n.t.Helper()
	needNats(n.t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, natsBin, "-s", n.url, "kv", "get", events.BucketHealth, proxy, "--raw")
	cmd.Env = n.environ()
	out, err := cmd.Output() // fails while there is no record
	if err != nil {
		return h, false
	}
	return h, json.Unmarshal(out, &h) == nil
}

// waitHealth waits until cond holds for proxy's health record and returns it.
func (n *node) waitHealth(proxy, what string, budget time.Duration, cond func(events.ProxyHealth) bool) events.ProxyHealth {
	n.t.Helper()
	var h events.ProxyHealth
	waitUntil(n.t, what, budget, func() (bool, string) {
		var ok bool
		h, ok = n.proxyHealth(proxy)
		b, _ := json.Marshal(h)
		return ok && cond(h), string(b)
	})
	return h
}

func pathOf(h events.ProxyHealth, path string) events.PathCheck {
	for _, pc := range h.Paths {
		if pc.Path == path {
			return pc
		}
	}
	return events.PathCheck{}
}

// Debian's Squid, adopted as an external proxy with its stock settings, passes the crawler's
// address on to the sites it fetches plain-HTTP pages from: transparent, X-Forwarded-For (and
// Via) named on the forward path, while the CONNECT path, a tunnel, shows nothing. With the
// lines of docs/providers/external.md it is elite, without a spec change. egressd's own
// forward proxy (the real binary, started by the local provider) is elite on both paths.
func TestSquidAnonymityEndToEnd(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	port, reconfigure := startSquid(t, dir, false)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 30))
	hc := `"healthCheck":{"intervalSeconds":1,"timeoutSeconds":1,"failureThreshold":3,"successThreshold":1}`
	n.nats("kv", "put", "proxies", "squid", fmt.Sprintf(`{"mode":"external","endpoint":{"host":"127.0.0.1","port":%d,"expectedEgress":"127.0.0.1"},%s}`, port, hc))
	n.nats("kv", "put", "proxies", "own", `{"provider":"local",`+hc+`}`)

	h := n.waitHealth("squid", "stock squid judged transparent", 60*time.Second, func(h events.ProxyHealth) bool {
		return h.Healthy && h.Anonymity == events.AnonymityTransparent
	})
	fwd, conn := pathOf(h, events.PathForward), pathOf(h, events.PathConnect)
	t.Logf("stock squid: %s; forward path %+v; CONNECT path %+v", h.Anonymity, fwd, conn)
	if fwd.Anonymity != events.AnonymityTransparent || !slices.Contains(fwd.Leaked, "X-Forwarded-For") || !slices.Contains(fwd.Leaked, "Via") {
		t.Errorf("stock squid's forward path: %+v", fwd)
	}
	if conn.Anonymity != events.AnonymityElite || len(conn.Leaked) != 0 || conn.EgressIP != "127.0.0.1" {
		t.Errorf("stock squid's CONNECT path: %+v", conn)
	}
	if !slices.Contains(h.LeakedHeaders, "X-Forwarded-For") || h.EgressIP != "127.0.0.1" || h.ExpectedEgress != "127.0.0.1" {
		t.Errorf("stock squid's record: %+v", h)
	}

	reconfigure(true)
	h = n.waitHealth("squid", "fixed squid judged elite", 60*time.Second, func(h events.ProxyHealth) bool {
		return h.Healthy && h.Anonymity == events.AnonymityElite
	})
	for _, pc := range h.Paths {
		if pc.Anonymity != events.AnonymityElite || len(pc.Leaked) != 0 || pc.Error != "" {
			t.Errorf("fixed squid's %s path: %+v", pc.Path, pc)
		}
	}
	if len(h.LeakedHeaders) != 0 {
		t.Errorf("fixed squid leaks %v", h.LeakedHeaders)
	}
	// The verdict's change is an event, from the prober.
	if out := n.egressd("events", "-f=false", "--proxy", "squid", "--kind", "health"); !strings.Contains(out, string(events.ReasonAnonymityChanged)) ||
		!strings.Contains(out, "anonymity elite (was transparent)") {
		t.Errorf("no AnonymityChanged event:\n%s", out)
	}

	own := n.waitHealth("own", "egressd's forward proxy judged", 60*time.Second, func(h events.ProxyHealth) bool {
		return h.Healthy && h.Anonymity != ""
	})
	if own.Anonymity != events.AnonymityElite || len(own.LeakedHeaders) != 0 {
		t.Errorf("egressd forward-proxy is not elite: %+v", own)
	}
	for _, pc := range own.Paths {
		if pc.Anonymity != events.AnonymityElite || pc.Error != "" {
			t.Errorf("egressd forward-proxy's %s path: %+v", pc.Path, pc)
		}
	}
}
