package forwardproxy

import (
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/leaseauth"
)

// With a lease key in its auth file, the proxy passes exactly the unexpired tokens signed
// with that key for itself, and a password file turns into a key file in place.
func TestLeaseTokensAtTheProxy(t *testing.T) {
	upstream, seen := recordingServer(t, false)
	authFile := filepath.Join(t.TempDir(), "auth")
	if err := WriteAuthFile(authFile, "crawler", "pw"); err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, Config{AuthFile: authFile})
	status := func(user *url.Userinfo) int { t.Helper(); return getVia(t, proxy, upstream.URL+"/", user).StatusCode }
	if got := status(url.UserPassword("crawler", "pw")); got != 200 {
		t.Fatalf("password before the switch: %d", got)
	}

	master := leaseauth.NewMaster()
	key := master.ProxyKey("p1")
	if err := WriteLeaseKeyFile(authFile, key.FileLine()); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sign := func(k leaseauth.Key, exp time.Time) *url.Userinfo {
		return url.UserPassword(k.Sign("p1.0.0123456789abcdef", exp))
	}
	good := sign(key, now.Add(time.Minute))
	forged, _ := good.Password()
	forged = forged[:len(forged)-2] + "AA"
	for _, c := range []struct {
		name string
		user *url.Userinfo
		want int
	}{
		{"a lease token", good, 200},
		{"the old password", url.UserPassword("crawler", "pw"), 407},
		{"no credential", nil, 407},
		{"expired", sign(key, now.Add(-leaseauth.Skew-2*time.Second)), 407},
		{"forged", url.UserPassword(good.Username(), forged), 407},
		{"altered lease ID", url.UserPassword("p1.0.0123456789abcdee", func() string { p, _ := good.Password(); return p }()), 407},
		{"another proxy's", sign(master.ProxyKey("p2"), now.Add(time.Minute)), 407},
		{"another master's", sign(leaseauth.NewMaster().ProxyKey("p1"), now.Add(time.Minute)), 407},
	} {
		if got := status(c.user); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	assertNoLeaks(t, seen().header)
}

func TestWriteLeaseKeyFileRejectsGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth")
	for _, bad := range []string{"", "p1:lease:short", "u:sha256:00:00"} {
		if err := WriteLeaseKeyFile(path, bad); err == nil {
			t.Errorf("WriteLeaseKeyFile(%q) accepted", bad)
		}
	}
}

// A revocation list beside the key: the tokens of the leases it names are refused from the next
// request on, other leases' pass, and a list that turns unusable or vanishes leaves the last one
// in force (never failing open). A token of another instance of the proxy is refused.
func TestRevokedAndRebuiltTokensAreRefused(t *testing.T) {
	upstream, _ := recordingServer(t, false)
	dir := t.TempDir()
	authFile, revFile := filepath.Join(dir, "auth"), filepath.Join(dir, "revoked")
	master := leaseauth.NewMaster()
	key := master.InstanceKey("p1", "gen-2")
	if err := WriteLeaseKeyFile(authFile, key.FileLine()); err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, Config{AuthFile: authFile, RevocationsFile: revFile})
	exp := time.Now().Add(time.Minute)
	released := url.UserPassword(key.Sign("p1.0.00000000000000aa", exp))
	held := url.UserPassword(key.Sign("p1.1.00000000000000bb", exp))
	rebuilt := url.UserPassword(master.InstanceKey("p1", "gen-1").Sign("p1.2.00000000000000cc", exp))
	status := func(user *url.Userinfo) int { t.Helper(); return getVia(t, proxy, upstream.URL+"/", user).StatusCode }
	if status(released) != 200 || status(held) != 200 {
		t.Fatal("tokens refused before any revocation (and with no list yet)")
	}
	if got := status(rebuilt); got != 407 {
		t.Fatalf("a token of the proxy's previous instance: %d, want 407", got)
	}
	var list leaseauth.Revocations
	list.Add("p1.0.00000000000000aa", exp.Add(leaseauth.Skew))
	if err := WriteRevocationsFile(revFile, &list); err != nil {
		t.Fatal(err)
	}
	// In this order: the list must have been read before it turns unusable.
	for _, c := range []struct {
		name  string
		write func()
	}{
		{"listed", func() {}},
		{"corrupt", func() { os.WriteFile(revFile, []byte("garbage\n"), 0o644) }},
		{"vanished", func() { os.Remove(revFile) }},
	} {
		name := c.name
		c.write()
		if got := status(released); got != 407 {
			t.Fatalf("%s: a revoked token: %d, want 407", name, got)
		}
		if got := status(held); got != 200 {
			t.Fatalf("%s: an unrevoked token: %d, want 200", name, got)
		}
	}
}

// echoServer answers every byte it gets, for tunnels that are never idle.
func echoServer(t *testing.T) string {
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

// openTunnel opens a CONNECT tunnel with user's credentials to an echo server and keeps it
// busy; the returned channel yields when the tunnel ends.
func openTunnel(t *testing.T, proxy string, user *url.Userinfo) <-chan time.Time {
	t.Helper()
	target := echoServer(t)
	pass, _ := user.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(user.Username() + ":" + pass))
	resp, c, br := rawRequest(t, proxy, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\nProxy-Authorization: Basic "+auth+"\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT status %d", resp.StatusCode)
	}
	c.SetDeadline(time.Now().Add(time.Minute))
	ended := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 4)
		for {
			if _, err := io.WriteString(c, "ping"); err != nil {
				break
			}
			if _, err := io.ReadFull(br, buf); err != nil {
				break
			}
			time.Sleep(50 * time.Millisecond) // pacing, not synchronisation: the tunnel is never idle
		}
		ended <- time.Now()
	}()
	return ended
}

// A tunnel opened with a lease token is closed once the token is past its expiry (plus the
// skew and grace), and at once when its lease is revoked.
func TestTunnelsEndWithTheirToken(t *testing.T) {
	oldGrace, oldPoll := tunnelGrace, revocationPoll
	tunnelGrace, revocationPoll = 0, 20*time.Millisecond
	t.Cleanup(func() { tunnelGrace, revocationPoll = oldGrace, oldPoll })
	dir := t.TempDir()
	authFile, revFile := filepath.Join(dir, "auth"), filepath.Join(dir, "revoked")
	key := leaseauth.NewMaster().InstanceKey("p1", "g")
	if err := WriteLeaseKeyFile(authFile, key.FileLine()); err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, Config{AuthFile: authFile, RevocationsFile: revFile})

	t.Run("expiry", func(t *testing.T) {
		exp := time.Now().Add(time.Second).Truncate(time.Second)
		ended := openTunnel(t, proxy, url.UserPassword(key.Sign("p1.0.00000000000000aa", exp)))
		select {
		case at := <-ended:
			if at.Before(exp.Add(leaseauth.Skew)) {
				t.Fatalf("the tunnel ended at %v, before its token's expiry %v plus the skew", at, exp)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the tunnel outlived its token")
		}
	})
	t.Run("revocation", func(t *testing.T) {
		exp := time.Now().Add(time.Hour)
		ended := openTunnel(t, proxy, url.UserPassword(key.Sign("p1.1.00000000000000bb", exp)))
		select {
		case <-ended:
			t.Fatal("the tunnel ended before any revocation")
		case <-time.After(300 * time.Millisecond):
		}
		var list leaseauth.Revocations
		list.Add("p1.1.00000000000000bb", exp)
		if err := WriteRevocationsFile(revFile, &list); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Fatal("the tunnel outlived its lease's revocation")
		}
	})
}

// Sentinel: whatever the proxy refuses, counts or closes, neither a token nor the key reaches
// its log (debug included) or its refusal counts; the reason does.
func TestRefusalsNeverQuoteTheToken(t *testing.T) {
	oldPoll, oldEvery := revocationPoll, refusalsEvery
	revocationPoll, refusalsEvery = 20*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { revocationPoll, refusalsEvery = oldPoll, oldEvery })
	upstream, _ := recordingServer(t, false)
	dir := t.TempDir()
	authFile, revFile, countFile := filepath.Join(dir, "auth"), filepath.Join(dir, "revoked"), filepath.Join(dir, "refusals.json")
	m := leaseauth.NewMaster()
	key := m.InstanceKey("p1", "g2")
	if err := WriteLeaseKeyFile(authFile, key.FileLine()); err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	proxy := startProxy(t, Config{AuthFile: authFile, RevocationsFile: revFile, RefusalsFile: countFile, Logger: log})
	exp := time.Now().Add(time.Minute)
	revokedUser := url.UserPassword(key.Sign("p1.0.00000000000000aa", exp))
	oldUser := url.UserPassword(m.InstanceKey("p1", "g1").Sign("p1.1.00000000000000bb", exp))
	ended := openTunnel(t, proxy, revokedUser)
	var list leaseauth.Revocations
	list.Add("p1.0.00000000000000aa", exp)
	if err := WriteRevocationsFile(revFile, &list); err != nil {
		t.Fatal(err)
	}
	<-ended
	for _, u := range []*url.Userinfo{revokedUser, oldUser} {
		if code := getVia(t, proxy, upstream.URL+"/", u).StatusCode; code != 407 {
			t.Fatalf("status %d, want 407", code)
		}
	}
	var counts Refusals
	deadline := time.Now().Add(20 * time.Second)
	for counts.Refused["instance"] < 1 && time.Now().Before(deadline) {
		data, _ := os.ReadFile(countFile)
		counts, _ = ReadRefusals(data)
		time.Sleep(20 * time.Millisecond)
	}
	if counts.Refused["revoked"] != 1 || counts.Refused["instance"] != 1 {
		t.Fatalf("refusal counts %v, want revoked 1 and instance 1", counts.Refused)
	}
	data, _ := os.ReadFile(countFile)
	out := buf.String() + string(data)
	if !strings.Contains(out, "refused=revoked") || !strings.Contains(out, "refused=instance") || !strings.Contains(out, "lease token revoked") {
		t.Errorf("the log does not say why:\n%s", out)
	}
	for _, u := range []*url.Userinfo{revokedUser, oldUser} {
		pass, _ := u.Password()
		sig := pass[strings.LastIndex(pass, ".")+1:]
		if strings.Contains(out, pass) || strings.Contains(out, sig) {
			t.Errorf("a token leaked:\n%s", out)
		}
	}
	if k := strings.Split(strings.TrimSpace(key.FileLine()), ":")[4]; strings.Contains(out, k) {
		t.Errorf("the key leaked:\n%s", out)
	}
}
