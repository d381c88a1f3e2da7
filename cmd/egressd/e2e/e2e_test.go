package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func allPhase(names []string, phase events.Phase) func(map[string]fleet.Row) bool {
	return func(rows map[string]fleet.Row) bool {
		for _, n := range names {
			if rows[n].Phase != phase {
				return false
			}
		}
		return true
	}
}

// upstream is a local HTTP(S) server that records the headers it received.
func upstream(t *testing.T, tlsOn bool) (*httptest.Server, chan http.Header) {
	seen := make(chan http.Header, 16)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		fmt.Fprintf(w, "hello from %s", r.RemoteAddr)
	})
	var s *httptest.Server
	if tlsOn {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s, seen
}

func viaProxy(t *testing.T, proxyAddr, target string, user *url.Userinfo) (*http.Response, string) {
	t.Helper()
	pu := &url.URL{Scheme: "http", Host: proxyAddr, User: user}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(pu),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the test's own httptest certificate
	}}
	resp, err := c.Get(target)
	if err != nil {
		t.Fatalf("GET %s via %s: %v", target, proxyAddr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The README's tour, end to end: declare proxies with the nats CLI, use one, replace
// one by changing its port, reject and then accept a bad spec (docs/proxyspec.md), delete them all, and leave no
// forward-proxy process behind.
func TestEndToEnd(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 21))

	names := []string{"p1", "p2", "p3"}
	for _, name := range names {
		n.nats("kv", "put", "proxies", name, `{"provider":"local"}`)
	}
	rows := n.waitRows("three Ready proxies", 30*time.Second, allPhase(names, events.PhaseReady))
	addrs := map[string]bool{}
	for _, name := range names {
		addrs[rows[name].Address] = true
	}
	if len(addrs) != 3 {
		t.Fatalf("proxies share addresses: %v", addrs)
	}
	if got := len(proxyProcs(t, dir)); got != 3 {
		t.Fatalf("%d forward-proxy processes, want 3", got)
	}
	table := n.egressd("status")
	for _, col := range []string{"NAME", "MODE", "PROVIDER", "PHASE", "ADDRESS", "REASON", "AGE", "HEALTHY", "LEASES", "p1", "Ready"} {
		if !strings.Contains(table, col) {
			t.Errorf("status table lacks %q:\n%s", col, table)
		}
	}

	t.Run("a request goes through a proxy and leaks nothing", func(t *testing.T) {
		web, seen := upstream(t, false)
		resp, body := viaProxy(t, rows["p1"].Address, web.URL, nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "hello from 127.0.21.") {
			t.Fatalf("plain HTTP via proxy: %d %q", resp.StatusCode, body)
		}
		h := <-seen
		for _, k := range []string{"Via", "X-Forwarded-For", "Forwarded", "Proxy-Authorization"} {
			if v := h.Get(k); v != "" {
				t.Errorf("upstream saw %s: %q", k, v)
			}
		}
		tlsWeb, _ := upstream(t, true)
		resp, body = viaProxy(t, rows["p1"].Address, tlsWeb.URL, nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "hello") {
			t.Fatalf("CONNECT via proxy: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("a port change replaces the proxy", func(t *testing.T) {
		old := rows["p2"].Address
		n.nats("kv", "put", "proxies", "p2", `{"provider":"local","port":8080}`)
		// Rolled successor first (decision 98): the rollout ends once the old instance is
		// deleted and the proxy Ready on the new one.
		rows = n.waitRows("p2 on port 8080, its rollout done", 30*time.Second, func(r map[string]fleet.Row) bool {
			return r["p2"].Phase == events.PhaseReady && strings.HasSuffix(r["p2"].Address, ":8080") && r["p2"].Status.Rollout == nil
		})
		if c, err := net.DialTimeout("tcp", old, time.Second); err == nil {
			c.Close()
			t.Fatalf("the replaced proxy still listens on %s", old)
		}
		if got := len(proxyProcs(t, dir)); got != 3 {
			t.Fatalf("%d forward-proxy processes after the replacement, want 3", got)
		}
	})

	t.Run("a bad spec is Invalid and loses nothing; fixing it recovers", func(t *testing.T) {
		n.nats("kv", "put", "proxies", "p3", `{"provider":"local","port":"eighty"}`)
		rows := n.waitRows("p3 Invalid", 30*time.Second, func(r map[string]fleet.Row) bool { return r["p3"].Phase == events.PhaseInvalid })
		if !strings.Contains(rows["p3"].Message, "port") {
			t.Fatalf("Invalid message does not name the field: %q", rows["p3"].Message)
		}
		if !strings.Contains(n.egressd("status"), "p3: port") {
			t.Errorf("status table does not explain the Invalid proxy")
		}
		if got := len(proxyProcs(t, dir)); got != 3 {
			t.Fatalf("an invalid edit changed the instances: %d processes", got)
		}
		n.nats("kv", "put", "proxies", "p3", `{"provider":"local"}`)
		n.waitRows("p3 Ready again", 30*time.Second, allPhase([]string{"p3"}, events.PhaseReady))
	})

	for _, name := range names {
		n.nats("kv", "del", "-f", "proxies", name)
	}
	n.waitRows("every proxy gone", 30*time.Second, func(r map[string]fleet.Row) bool { return len(r) == 0 })
	if pids := proxyProcs(t, dir); len(pids) != 0 {
		t.Fatalf("forward-proxy processes left after deletion: %v", pids)
	}
	if code := n.stop(); code != 0 {
		t.Fatalf("egressd exited %d after SIGTERM, want 0", code)
	}
}

// kill -9 of egressd run while 20 proxies converge, then a restart: all 20 converge, with
// exactly 20 forward-proxy processes, none duplicated, none leaked.
func TestKill9WhileConverging(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 22))
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("crawl-%02d", i))
	}
	for _, name := range names {
		n.nats("kv", "put", "proxies", name, `{"provider":"local"}`)
	}
	// Kill once some, but not all, have converged: the rest are in every in-between state.
	n.waitRows("a few proxies Running", 30*time.Second, func(r map[string]fleet.Row) bool {
		running := 0
		for _, row := range r {
			if row.Phase == events.PhaseRunning || row.Phase == events.PhaseReady {
				running++
			}
		}
		return running >= 3
	})
	n.kill9()
	if got := len(proxyProcs(t, dir)); got > 20 {
		t.Fatalf("%d forward-proxy processes before restart", got)
	}
	n.start()
	rows := n.waitRows("all 20 Ready after the restart", 3*time.Minute, allPhase(names, events.PhaseReady))
	pids := proxyProcs(t, dir)
	if len(pids) != 20 {
		t.Fatalf("%d forward-proxy processes, want exactly 20", len(pids))
	}
	addrs := map[string]string{}
	for _, name := range names {
		a := rows[name].Address
		if other, dup := addrs[a]; dup {
			t.Fatalf("%s and %s share %s", name, other, a)
		}
		addrs[a] = name
		if c, err := net.DialTimeout("tcp", a, time.Second); err != nil {
			t.Fatalf("%s (%s) does not accept connections: %v", name, a, err)
		} else {
			c.Close()
		}
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "data", "local", "local"))
	dirs := 0
	for _, e := range ents {
		if e.IsDir() {
			dirs++
		}
	}
	if dirs != 20 {
		t.Fatalf("%d instance directories, want 20", dirs)
	}
	for _, name := range names {
		n.nats("kv", "del", "-f", "proxies", name)
	}
	n.waitRows("every proxy gone", time.Minute, func(r map[string]fleet.Row) bool { return len(r) == 0 })
	if pids := proxyProcs(t, dir); len(pids) != 0 {
		t.Fatalf("processes left: %v", pids)
	}
}

// User-data and passwords never reach logs, events, status or errors.
func TestSecretsNeverLeak(t *testing.T) {
	needNats(t)
	const userData, password = "SENTINEL-USERDATA-c41d", "SENTINEL-PASSWORD-5e0b"
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 23))
	good := fmt.Sprintf(`{"provider":"local","cloudInit":"#cloud-config\n# %s\n","auth":{"username":"crawler","password":"%s"}}`, userData, password)
	n.nats("kv", "put", "proxies", "sec", good)
	n.nats("kv", "put", "cloud_init", "doc", "#cloud-config\n# "+userData)
	n.nats("kv", "put", "proxies", "ref", `{"provider":"local","cloudInitRef":"doc"}`)
	// Invalid specs carrying the secrets, so errors are exercised too.
	n.nats("kv", "put", "proxies", "bad1", fmt.Sprintf(`{"provider":"local","port":0.5,"cloudInit":"%s","auth":{"username":"u","password":"%s"}}`, userData, password))
	n.nats("kv", "put", "proxies", "bad2", fmt.Sprintf(`{"provider":"local","auth":{"username":"u","password":%d}}`, 12345))
	n.nats("kv", "put", "proxies", "bad3", fmt.Sprintf(`{"mode":"external","endpoint":{"host":"crawler:%s@10.0.0.1"}}`, password))
	// A pool whose template carries both, and one whose spec does not parse with them in it.
	n.nats("kv", "put", "pools", "crawl", fmt.Sprintf(`{"replicas":1,"template":{"provider":"local","cloudInit":"#cloud-config\n# %s\n","auth":{"username":"crawler","password":"%s"}}}`, userData, password))
	n.nats("kv", "put", "pools", "badpool", fmt.Sprintf(`{"replicas":1,"template":{"provider":"local","port":0.5,"auth":{"username":"u","password":"%s"}}}`, password))
	waitUntil(t, "pool crawl Ready, badpool Invalid", 30*time.Second, func() (bool, string) {
		var pools []fleet.PoolRow
		out := n.egressd("status", "pools", "-o", "json")
		if json.Unmarshal([]byte(out), &pools) != nil || len(pools) != 2 {
			return false, out
		}
		return pools[0].Phase == events.PoolInvalid && pools[1].Phase == events.PoolReady && pools[1].Ready == 1, out
	})
	n.waitRows("sec and ref Running, bad ones Invalid", 30*time.Second, func(r map[string]fleet.Row) bool {
		return r["sec"].Phase == events.PhaseReady && r["ref"].Phase == events.PhaseReady &&
			r["bad1"].Phase == events.PhaseInvalid && r["bad2"].Phase == events.PhaseInvalid && r["bad3"].Phase == events.PhaseInvalid
	})
	// Replace and delete too, so every op kind has run with the secrets in the spec.
	n.nats("kv", "put", "proxies", "sec", strings.Replace(good, `"local"`, `"local","port":8080`, 1))
	n.waitRows("sec replaced", 30*time.Second, func(r map[string]fleet.Row) bool {
		return r["sec"].Phase == events.PhaseReady && strings.HasSuffix(r["sec"].Address, ":8080")
	})
	n.nats("kv", "del", "-f", "proxies", "ref")
	n.waitRows("ref deleted", 30*time.Second, func(r map[string]fleet.Row) bool { _, ok := r["ref"]; return !ok })

	places := map[string]string{
		"egressd log":         n.logs(),
		"status table":        n.egressd("status"),
		"status json":         n.egressd("status", "-o", "json"),
		"events stream":       eventsDump(t, n.url),
		"proxy_status bucket": statusDump(n),
		"status pools table":  n.egressd("status", "pools"),
		"status pools json":   n.egressd("status", "pools", "-o", "json"),
		"pool_status bucket":  n.nats("kv", "get", events.BucketPoolStatus, "crawl", "--raw") + n.nats("kv", "get", events.BucketPoolStatus, "badpool", "--raw"),
	}
	for what, text := range places {
		for _, s := range []string{userData, password, "12345"} {
			if strings.Contains(text, s) {
				t.Errorf("%s contains a secret (%s)", what, s)
			}
		}
	}
	// The instances' own files: the auth file holds a salted hash, never the password.
	_ = filepath.WalkDir(filepath.Join(dir, "data", "local"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), password) || strings.Contains(string(b), userData) {
			t.Errorf("%s contains a secret", p)
		}
		return nil
	})
	if !strings.Contains(places["events stream"], `"kind":"pool"`) || !strings.Contains(places["pool_status bucket"], `"members"`) {
		t.Fatalf("no pool event or ledger to check; the pool part proved nothing:\n%.500s", places["pool_status bucket"])
	}
	if !strings.Contains(places["events stream"], `"kind":"op"`) {
		t.Fatalf("the events dump holds no op results; the check above proved nothing:\n%.500s", places["events stream"])
	}
}

// eventsDump reads every message of both event streams, subjects and headers included.
func eventsDump(t *testing.T, url string) string {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b strings.Builder
	for _, stream := range []string{events.StreamEvents, events.StreamLeaseEvents} {
		cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for got := -1; got != 0; {
			batch, err := cons.FetchNoWait(100)
			if err != nil {
				t.Fatal(err)
			}
			got = 0
			for m := range batch.Messages() {
				got++
				fmt.Fprintf(&b, "%s %v %s\n", m.Subject(), m.Headers(), m.Data())
			}
		}
	}
	return b.String()
}

func statusDump(n *node) string {
	var b strings.Builder
	for _, key := range strings.Fields(n.nats("kv", "ls", events.BucketStatus)) {
		b.WriteString(n.nats("kv", "get", events.BucketStatus, key, "--raw"))
	}
	return b.String()
}

// A config with an unknown key stops egressd at once with the key and its line.
func TestBadConfigIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(cfg, []byte("providers:\n  - name: local\n    type: local\n    lokal: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(egressdBin, "run", "--config", cfg, "--data-dir", filepath.Join(dir, "d"), "--nats-listen", freeAddr(t)).CombinedOutput()
	if err == nil {
		t.Fatal("egressd accepted a config with an unknown key")
	}
	if !strings.Contains(string(out), "line 4") || !strings.Contains(string(out), "lokal") {
		t.Fatalf("error does not name the key and line:\n%s", out)
	}
}
