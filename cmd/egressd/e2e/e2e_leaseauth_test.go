package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
)

// squidAuthDir holds what Squid's helper runs as: a copy of the egressd binary and the
// proxy's key file, both reachable by the user Squid drops to as root (the test binary's own
// temp dirs are not).
func squidAuthDir(t *testing.T, keyLine string) (bin, keyFile string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "egressd-squid-auth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(egressdBin)
	if err != nil {
		t.Fatal(err)
	}
	bin, keyFile = filepath.Join(dir, "egressd"), filepath.Join(dir, "egressd.key")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(keyLine), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("proxy")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(keyFile, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return bin, keyFile
}

// squidAuthLines put `egressd squid-auth` in front of Squid's access rules: only a lease's
// credentials pass, from localhost as from anywhere. credentialsttl is Squid's cache of a
// helper's OK; a token's expiry is only seen when the helper is asked again
// (docs/leases.md#stock-squid).
//
// The helper honours the revocation list beside the key (revokedFile), which `egressd
// lease-revocations` keeps fresh.
func squidAuthLines(bin, keyFile string) string {
	return fmt.Sprintf(`auth_param basic program %s squid-auth --key-file %s --revocations-file %s
auth_param basic children 2
auth_param basic realm egressd
auth_param basic credentialsttl 1 second
acl leased proxy_auth REQUIRED
http_access allow leased
`, bin, keyFile, revokedFile(keyFile))
}

// revokedFile is where the revocation list of the Squid whose key is at keyFile lives.
func revokedFile(keyFile string) string { return filepath.Join(filepath.Dir(keyFile), "revoked") }

// followRevocations runs `egressd lease-revocations` for proxy into out until the test ends.
func followRevocations(t *testing.T, n *node, proxy, out string) {
	t.Helper()
	cmd := exec.Command(egressdBin, "lease-revocations", "--proxy", proxy, "--out", out, "--nats-url", n.url)
	cmd.Env = n.environ()
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("egressd lease-revocations: %v\n%s", err, logs.String())
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("egressd lease-revocations did not stop on SIGTERM")
		}
	})
	waitUntil(t, "the revocation list to be written", 30*time.Second, func() (bool, string) {
		_, err := os.Stat(out)
		return err == nil, fmt.Sprint(err)
	})
}

// refusedWithin asks through u until the proxy answers 407, and fails unless that came within
// bound of since (the promise: a released lease's token stops within seconds).
func refusedWithin(t *testing.T, what, u, web string, since time.Time, bound time.Duration) {
	t.Helper()
	var code string
	waitUntil(t, what+" to be refused", 30*time.Second, func() (bool, string) {
		code = curlVia(t, u, web)
		return code == "407", "HTTP " + code
	})
	if took := time.Since(since); took > bound {
		t.Errorf("%s: refused %v after its lease ended, more than %v", what, took.Round(time.Millisecond), bound)
	}
}

// startAuthSquid is startSquid with squid-auth guarding every request.
func startAuthSquid(t *testing.T, dir, bin, keyFile string) int {
	t.Helper()
	port, _ := startSquidLines(t, dir, func(bool) string { return "" }, false)
	// startSquidLines appends its lines after Debian's "allow localhost, deny all", where an
	// auth rule would never be reached; the config is rewritten with the rule in front.
	conf := squidConfPath(t, port)
	raw, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(raw), "http_access allow localhost\n", squidAuthLines(bin, keyFile), 1)
	if text == string(raw) {
		t.Fatal("no access rule to replace in the squid config")
	}
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(findSquid(t), "-k", "parse", "-f", conf).CombinedOutput(); err != nil {
		t.Fatalf("squid -k parse: %v\n%s", err, out)
	}
	reconfigureSquid(t, conf)
	return port
}

// squidConfPath finds the config of the Squid listening on port among the test Squids.
func squidConfPath(t *testing.T, port int) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), "egressd-squid-*", "squid.conf"))
	for _, m := range matches {
		b, _ := os.ReadFile(m)
		if strings.Contains(string(b), fmt.Sprintf("http_port 127.0.0.1:%d\n", port)) {
			return m
		}
	}
	t.Fatalf("no squid config for port %d", port)
	return ""
}

func reconfigureSquid(t *testing.T, conf string) {
	t.Helper()
	if out, err := exec.Command(findSquid(t), "-k", "reconfigure", "-f", conf).CombinedOutput(); err != nil {
		t.Fatalf("squid -k reconfigure: %v\n%s", err, out)
	}
}

func (n *node) leaseCall(subject, req string) (events.LeaseReply, string) {
	n.t.Helper()
	out := n.nats("req", "--raw", "--timeout", "5s", subject, req)
	var r events.LeaseReply
	_ = json.Unmarshal([]byte(strings.TrimSpace(out)), &r)
	return r, out
}

// withCreds is u with its credentials replaced.
func withCreds(t *testing.T, u string, user *url.Userinfo) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.User = user
	return p.String()
}

func credsOf(t *testing.T, u string) *url.Userinfo {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		t.Fatalf("lease URL without credentials")
	}
	return p.User
}

// Lease-bound credentials, end to end, at egressd's own forward proxy (local provider) and at
// a stock Squid with `egressd squid-auth`: a lease's URL works; a forged, altered or other
// proxy's token is refused with 407 at any time; a renewal hands out a new token while the
// old one works on until its own expiry (no gap); a released lease's token, and one reported
// blocked with release, is refused within 5 s while the other leases' tokens pass; after
// expiry (plus the skew grace) 407. The probers get through on tokens of their own: both
// proxies turn Ready.
func TestLeaseBoundCredentialsEndToEnd(t *testing.T) {
	needNats(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is required (.ci/run installs it)")
	}
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 82))
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()

	keyLine := n.egressd("lease-key", "--proxy", "sq-1")
	if _, err := leaseauth.ParseFileLine(keyLine); err != nil {
		t.Fatalf("egressd lease-key printed no key line: %v", err)
	}
	bin, keyFile := squidAuthDir(t, keyLine)
	followRevocations(t, n, "sq-1", revokedFile(keyFile))
	squidPort := startAuthSquid(t, dir, bin, keyFile)
	// Squid re-reads its config in the background.
	waitUntil(t, "squid to ask for credentials", 30*time.Second, func() (bool, string) {
		code := curlVia(t, fmt.Sprintf("http://127.0.0.1:%d", squidPort), web.URL)
		return code == "407", "HTTP " + code
	})

	hc := `"healthCheck":{"intervalSeconds":1,"timeoutSeconds":1,"failureThreshold":2,"successThreshold":1}`
	n.nats("kv", "put", "proxies", "fp-1", `{"provider":"local","maxLeases":3,"attributes":{"kind":"fp"},"auth":{"mode":"lease"},`+hc+`}`)
	n.nats("kv", "put", "proxies", "sq-1", fmt.Sprintf(`{"mode":"external","endpoint":{"host":"127.0.0.1","port":%d},"maxLeases":3,"attributes":{"kind":"squid"},"auth":{"mode":"lease"},%s}`, squidPort, hc))
	swStatic := `{"provider":"local","maxLeases":1,"attributes":{"kind":"sw"},"auth":{"username":"crawler","password":"pw"},` + hc + `}`
	n.nats("kv", "put", "proxies", "sw-1", swStatic)
	n.waitRows("all Ready (the probers pass on their own tokens)", 60*time.Second, allPhase([]string{"fp-1", "sq-1", "sw-1"}, events.PhaseReady))

	type held struct {
		proxy string
		// ttl 30 s, renewed; ttl 25 s, released. Both outlast the checks made before the
		// renewal and the release on a loaded machine; the test then waits out the first.
		long, shrt events.LeaseReply
		renewed    events.LeaseReply
	}
	var hs []*held
	for _, kind := range []string{"fp", "squid"} {
		h := &held{}
		var raw string
		h.long, raw = n.acquire(fmt.Sprintf(`{"selector":{"kind":%q},"ttlSeconds":30,"holder":"e2e"}`, kind))
		if h.long.Lease.URL == "" {
			t.Fatalf("acquire %s: %s", kind, raw)
		}
		h.proxy = h.long.Lease.Proxy
		if h.shrt, raw = n.acquire(fmt.Sprintf(`{"selector":{"kind":%q},"ttlSeconds":25,"holder":"e2e"}`, kind)); h.shrt.Lease.URL == "" {
			t.Fatalf("acquire %s: %s", kind, raw)
		}
		if u := credsOf(t, h.long.Lease.URL); u.Username() != h.long.Lease.ID {
			t.Fatalf("%s: the URL's user is %q, want the lease ID", h.proxy, u.Username())
		}
		hs = append(hs, h)
	}
	other := map[string]string{hs[0].proxy: hs[1].long.Lease.URL, hs[1].proxy: hs[0].long.Lease.URL}

	for _, h := range hs {
		t.Logf("%s: lease %s until %s", h.proxy, h.long.Lease.ID, h.long.Lease.ExpiresAt.Format(time.RFC3339))
		u := credsOf(t, h.long.Lease.URL)
		pass, _ := u.Password()
		forged := pass[:len(pass)-3] + map[bool]string{true: "AAA", false: "BBB"}[!strings.HasSuffix(pass, "AAA")]
		later := strings.Replace(pass, "."+strconv.FormatInt(h.long.Lease.ExpiresAt.Unix(), 10)+".", "."+strconv.FormatInt(h.long.Lease.ExpiresAt.Unix()+3600, 10)+".", 1)
		if later == pass {
			t.Fatal("could not find the expiry in the token")
		}
		for _, c := range []struct {
			what, url, want string
		}{
			{"the lease's URL", h.long.Lease.URL, "200"},
			{"the second lease's URL", h.shrt.Lease.URL, "200"},
			{"no credentials", withCreds(t, h.long.Lease.URL, nil), "407"},
			{"a forged signature", withCreds(t, h.long.Lease.URL, url.UserPassword(u.Username(), forged)), "407"},
			{"an altered expiry", withCreds(t, h.long.Lease.URL, url.UserPassword(u.Username(), later)), "407"},
			{"another lease's ID", withCreds(t, h.long.Lease.URL, url.UserPassword(h.shrt.Lease.ID, pass)), "407"},
			{"another proxy's token", withCreds(t, h.long.Lease.URL, credsOf(t, other[h.proxy])), "407"},
			{"a made-up token", withCreds(t, h.long.Lease.URL, url.UserPassword(u.Username(), "v2.AAAAAAAA..99999999999.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")), "407"},
		} {
			if code := curlVia(t, c.url, web.URL); code != c.want {
				t.Errorf("%s, %s: HTTP %s, want %s", h.proxy, c.what, code, c.want)
			}
		}
		var raw string
		h.renewed, raw = n.leaseCall(events.LeaseRenewSubject, fmt.Sprintf(`{"id":%q,"ttlSeconds":120}`, h.long.Lease.ID))
		if h.renewed.Lease.ID != h.long.Lease.ID || h.renewed.Lease.URL == h.long.Lease.URL {
			t.Fatalf("%s: renew kept the ID and changed the token? %s", h.proxy, raw)
		}
		// No gap: the old token and the new both work right after the renewal.
		for what, u := range map[string]string{"the old token after renew": h.long.Lease.URL, "the renewed token": h.renewed.Lease.URL} {
			if code := curlVia(t, u, web.URL); code != "200" {
				t.Errorf("%s, %s: HTTP %s, want 200", h.proxy, what, code)
			}
		}
		// A released lease's token is refused within seconds, long before its expiry: the
		// leaser revokes it, and the proxy hears of it from its revocation list
		// (docs/leases.md#revocation). The other leases' tokens pass on.
		released := time.Now()
		if _, raw := n.leaseCall(events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, h.shrt.Lease.ID)); !strings.Contains(raw, `"released":true`) {
			t.Fatalf("release: %s", raw)
		}
		refusedWithin(t, h.proxy+": the released lease's token", h.shrt.Lease.URL, web.URL, released, 5*time.Second)
		if code := curlVia(t, h.renewed.Lease.URL, web.URL); code != "200" {
			t.Errorf("%s: a held lease's token after another's release: HTTP %s, want 200", h.proxy, code)
		}
		// A lease reported blocked with release: the same.
		blocked, raw := n.acquire(fmt.Sprintf(`{"selector":{"kind":%q},"ttlSeconds":60,"holder":"e2e"}`, map[bool]string{true: "fp", false: "squid"}[h == hs[0]]))
		if blocked.Lease.URL == "" {
			t.Fatalf("acquire: %s", raw)
		}
		if code := curlVia(t, blocked.Lease.URL, web.URL); code != "200" {
			t.Fatalf("%s: a fresh lease's token: HTTP %s", h.proxy, code)
		}
		reported := time.Now()
		if _, raw := n.leaseCall(events.LeaseReportSubject, fmt.Sprintf(`{"id":%q,"result":"blocked","target":"example.com","release":true}`, blocked.Lease.ID)); !strings.Contains(raw, `"released":true`) {
			t.Fatalf("report blocked with release: %s", raw)
		}
		refusedWithin(t, h.proxy+": the token of a lease reported blocked", blocked.Lease.URL, web.URL, reported, 5*time.Second)
	}

	// A running proxy switched from a password to lease mode takes tokens in place: the
	// reconciler sees the auth change, the provisioner delivers the key, the same instance
	// re-reads its auth file.
	before := n.rows()["sw-1"]
	n.nats("kv", "put", "proxies", "sw-1", strings.Replace(swStatic, `"auth":{"username":"crawler","password":"pw"}`, `"auth":{"mode":"lease"}`, 1))
	waitUntil(t, "sw-1 to pass a lease's token", 30*time.Second, func() (bool, string) {
		r, raw := n.acquire(`{"selector":{"kind":"sw"},"ttlSeconds":5}`)
		if r.Lease.URL == "" {
			return false, raw
		}
		defer n.leaseCall(events.LeaseReleaseSubject, fmt.Sprintf(`{"id":%q}`, r.Lease.ID))
		if credsOf(t, r.Lease.URL).Username() != r.Lease.ID {
			return false, "the leaser still hands out the password"
		}
		code := curlVia(t, r.Lease.URL, web.URL)
		return code == "200", "HTTP " + code
	})
	if code := curlVia(t, "http://crawler:pw@"+before.Address, web.URL); code != "407" {
		t.Errorf("sw-1's old password in lease mode: HTTP %s, want 407", code)
	}
	if after := n.rows()["sw-1"]; after.Address != before.Address || after.Status.InstanceID != before.Status.InstanceID {
		t.Errorf("switching to lease mode replaced the instance: %+v → %+v", before.Status, after.Status)
	}

	last := hs[0].long.Lease.ExpiresAt
	for _, h := range hs {
		if h.long.Lease.ExpiresAt.After(last) {
			last = h.long.Lease.ExpiresAt
		}
	}
	time.Sleep(time.Until(last.Add(leaseauth.Skew + 1500*time.Millisecond)))
	for _, h := range hs {
		for _, c := range []struct{ what, url, want string }{
			{"the expired lease", h.shrt.Lease.URL, "407"},
			{"the grant's token of the renewed lease", h.long.Lease.URL, "407"},
			{"the renewed token", h.renewed.Lease.URL, "200"},
		} {
			if code := curlVia(t, c.url, web.URL); code != c.want {
				t.Errorf("%s, after expiry, %s: HTTP %s, want %s", h.proxy, c.what, code, c.want)
			}
		}
	}
	// The proxies stayed Ready throughout: the probers' tokens keep passing.
	if rows := n.rows(); rows["fp-1"].Phase != events.PhaseReady || rows["sq-1"].Phase != events.PhaseReady || rows["sw-1"].Phase != events.PhaseReady {
		t.Errorf("phases after the test: fp-1 %s, sq-1 %s, sw-1 %s", rows["fp-1"].Phase, rows["sq-1"].Phase, rows["sw-1"].Phase)
	}
	// The key never reaches the node's log, its events or status.
	key := strings.Split(strings.TrimSpace(keyLine), ":")[4]
	if strings.Contains(n.logs(), key) {
		t.Error("the log holds a proxy's lease key")
	}
	revList, _ := os.ReadFile(revokedFile(keyFile))
	for _, out := range []string{n.egressd("events", "-f=false"), n.egressd("status", "-o", "json"), n.logs(), string(revList)} {
		if strings.Contains(out, key) {
			t.Error("events, status, the log or the revocation list hold a proxy's lease key")
		}
		// Nor any token: the revoked ones are named by their lease ID only.
		for _, h := range hs {
			for _, u := range []string{h.shrt.Lease.URL, h.long.Lease.URL, h.renewed.Lease.URL} {
				pass, _ := credsOf(t, u).Password()
				if strings.Contains(out, pass[strings.LastIndex(pass, ".")+1:]) {
					t.Errorf("events, status, the log or the revocation list hold a token of %s", h.proxy)
				}
			}
		}
	}
}
