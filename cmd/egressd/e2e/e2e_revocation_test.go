package e2e

import (
	"bufio"
	"encoding/base64"
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
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/readside/fleet"
)

// tcpEcho answers every byte it gets, so that a tunnel to it is never idle.
func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// busyTunnel opens a CONNECT tunnel through a lease's URL to target and keeps it busy; the
// channel yields when the tunnel ends.
func busyTunnel(t *testing.T, leaseURL, target string) <-chan time.Time {
	t.Helper()
	u, err := url.Parse(leaseURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	pass, _ := u.User.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, target, auth)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT through the lease: %v %v", resp, err)
	}
	ended := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 4)
		for {
			c.SetDeadline(time.Now().Add(time.Minute))
			if _, err := io.WriteString(c, "ping"); err != nil {
				break
			}
			if _, err := io.ReadFull(br, buf); err != nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // pacing: the tunnel is never idle
		}
		ended <- time.Now()
	}()
	return ended
}

// A lease-mode token at egressd's own forward proxy, end to end: an open CONNECT tunnel
// through it is closed once the token has expired (plus the skew and the grace), not left to
// run until either side hangs up; and a proxy rebuilt under the same name (deleted and
// declared again) is another instance, with another generation, that refuses the tokens
// handed out for its predecessor while passing its own; and with egressd gone, the proxy
// keeps refusing a revoked token and passing a held one.
func TestLeaseTokensEndWithTheirTunnelAndInstance(t *testing.T) {
	needNats(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is required (.ci/run installs it)")
	}
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 83))
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	hc := poolHealth
	spec := `{"provider":"local","maxLeases":3,"attributes":{"kind":"fp"},"auth":{"mode":"lease"},` + hc + `}`
	n.nats("kv", "put", "proxies", "fp-1", spec)
	first := n.waitRows("fp-1 Ready", 60*time.Second, allPhase([]string{"fp-1"}, events.PhaseReady))["fp-1"]
	if first.Status.Generation == "" {
		t.Fatal("the instance has no generation")
	}

	// A tunnel opened with a 5 s lease outlives neither the token nor the grace.
	short, raw := n.acquire(`{"selector":{"kind":"fp"},"ttlSeconds":5}`)
	if short.Lease.URL == "" {
		t.Fatalf("acquire: %s", raw)
	}
	ended := busyTunnel(t, short.Lease.URL, tcpEcho(t))
	select {
	case at := <-ended:
		if at.Before(short.Lease.ExpiresAt.Truncate(time.Second)) {
			t.Fatalf("the tunnel ended at %v, before its token expired (%v)", at, short.Lease.ExpiresAt)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the tunnel outlived its lease token by a minute")
	}

	// The same name, another instance.
	long, raw := n.acquire(`{"selector":{"kind":"fp"},"ttlSeconds":300}`)
	if long.Lease.URL == "" {
		t.Fatalf("acquire: %s", raw)
	}
	if code := curlVia(t, long.Lease.URL, web.URL); code != "200" {
		t.Fatalf("the lease's token: HTTP %s", code)
	}
	n.nats("kv", "del", "proxies", "fp-1", "-f")
	n.waitRows("fp-1 gone", 60*time.Second, func(rows map[string]fleet.Row) bool { _, ok := rows["fp-1"]; return !ok })
	n.nats("kv", "put", "proxies", "fp-1", spec)
	second := n.waitRows("fp-1 Ready again", 60*time.Second, allPhase([]string{"fp-1"}, events.PhaseReady))["fp-1"]
	if second.Status.Generation == first.Status.Generation || second.Status.Generation == "" {
		t.Fatalf("the rebuilt proxy's generation %q, its predecessor's %q", second.Status.Generation, first.Status.Generation)
	}
	old := withCreds(t, "http://"+second.Address, credsOf(t, long.Lease.URL))
	if code := curlVia(t, old, web.URL); code != "407" {
		t.Errorf("the predecessor's token at the rebuilt proxy: HTTP %s, want 407", code)
	}
	// Refused as another instance's (not only as revoked with its lease): the proxy counts why.
	counts := filepath.Join(dir, "data", "local", "local", second.Status.InstanceName, "refusals.json")
	waitUntil(t, "the rebuilt proxy to count an instance refusal", 30*time.Second, func() (bool, string) {
		b, err := os.ReadFile(counts)
		return err == nil && strings.Contains(string(b), `"instance":1`), string(b)
	})
	if p, _ := credsOf(t, long.Lease.URL).Password(); !strings.Contains(p, "."+first.Status.Generation+".") {
		t.Errorf("the token does not name the instance it was issued for")
	}
	fresh, raw := n.acquire(`{"selector":{"kind":"fp"},"ttlSeconds":120}`)
	if fresh.Lease.URL == "" {
		t.Fatalf("acquire: %s", raw)
	}
	if code := curlVia(t, fresh.Lease.URL, web.URL); code != "200" {
		t.Errorf("a lease on the rebuilt proxy: HTTP %s, want 200", code)
	}
	if tok, err := leaseauth.ParseToken(func() string { p, _ := credsOf(t, fresh.Lease.URL).Password(); return p }()); err != nil || tok.Instance != second.Status.Generation {
		t.Errorf("the new token names instance %q (%v), want %q", tok.Instance, err, second.Status.Generation)
	}

	// Offline: with egressd gone (kill -9: no NATS, no leaser, no provisioner), the proxy
	// keeps its last revocation list. The released lease's token stays refused, the held
	// one's keeps passing: neither open to all nor closed to all.
	gone, raw := n.acquire(`{"selector":{"kind":"fp"},"ttlSeconds":60}`)
	if gone.Lease.URL == "" {
		t.Fatalf("acquire: %s", raw)
	}
	released := time.Now()
	if _, raw := n.leaseCall(events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, gone.Lease.ID)); !strings.Contains(raw, `"released":true`) {
		t.Fatalf("release: %s", raw)
	}
	refusedWithin(t, "the released lease's token", gone.Lease.URL, web.URL, released, 5*time.Second)
	n.kill9()
	for what, c := range map[string]struct{ url, want string }{
		"a released lease's token, egressd gone": {gone.Lease.URL, "407"},
		"a held lease's token, egressd gone":     {fresh.Lease.URL, "200"},
	} {
		if code := curlVia(t, c.url, web.URL); code != c.want {
			t.Errorf("%s: HTTP %s, want %s", what, code, c.want)
		}
	}
}
