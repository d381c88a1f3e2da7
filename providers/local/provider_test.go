package local

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers"
)

// upstream is an HTTP server on 127.0.0.1 that answers with the address it saw the request
// come from.
func upstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		io.WriteString(w, host)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// through fetches url through the instance's proxy and returns the status and body.
func through(t *testing.T, inst providers.Instance, user *url.Userinfo, target string) (int, string) {
	t.Helper()
	proxy := &url.URL{Scheme: "http", Host: net.JoinHostPort(inst.Address, strconv.Itoa(inst.Port)), User: user}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get(target)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", target, proxy.Host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestLifecycle(t *testing.T) {
	cfg := testConfig(t, 10)
	p := newProvider(t, cfg)
	port := freePort(t)
	req := request("egress-life", port)
	req.Auth = &providers.Auth{Username: "crawler", Password: "pw-SENTINEL"}
	req.UserData = providers.UserData("#cloud-config\n# UD-SENTINEL\n")

	inst := mustCreate(t, p, req)
	if inst.ID != "local/egress-life" || inst.Name != req.Name || inst.Host != "local" || inst.Port != port {
		t.Errorf("Create = %+v", inst)
	}
	if !strings.HasPrefix(inst.Address, "127.77.") {
		t.Errorf("address %s is not from the pool", inst.Address)
	}
	srv := upstream(t)
	if status, _ := through(t, inst, nil, srv.URL); status != http.StatusProxyAuthRequired {
		t.Errorf("without credentials: %d, want 407", status)
	}
	if status, body := through(t, inst, url.UserPassword("crawler", "pw-SENTINEL"), srv.URL); status != 200 || body != "127.0.0.1" {
		t.Errorf("with credentials: %d %q (loopback instances do not bind their source by default)", status, body)
	}

	// The state on disk holds the marks, and neither the password nor the user-data.
	dir := filepath.Join(cfg.StateDir, req.Name)
	var m meta
	data, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.V != 1 || m.ID != inst.ID || m.UID != req.UID || m.Installation != testInstallation || !m.Managed ||
		m.Proxy != req.Proxy || m.Address != inst.Address || m.Port != port || m.BindSource || !m.Auth || m.CreatedAt.IsZero() {
		t.Errorf("instance.json = %+v", m)
	}
	filepath.WalkDir(cfg.StateDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := os.ReadFile(path)
			if strings.Contains(string(data), "pw-SENTINEL") || strings.Contains(string(data), "UD-SENTINEL") {
				t.Errorf("%s holds a secret", path)
			}
		}
		return nil
	})

	got := mustGet(t, p, inst.ID)
	if got.State != providers.StateRunning || got.Address != inst.Address || !got.Marks.CreatedAt.Equal(m.CreatedAt) {
		t.Errorf("Get = %+v", got)
	}
	list, err := p.List(ctxT(t))
	if err != nil || len(list) != 1 || list[0].ID != inst.ID {
		t.Errorf("List = %+v, %v", list, err)
	}

	pids := proxies(p, req.Name)
	if len(pids) != 1 {
		t.Fatalf("proxy processes: %v, want one", pids)
	}
	checkDetached(t, pids[0])
	if err := p.Delete(ctxT(t), inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctxT(t), inst.ID); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if alive(pids[0], p.pidPath(req.Name)) {
		t.Error("proxy still running after Delete")
	}
	if entries, _ := os.ReadDir(cfg.StateDir); len(entries) != 1 || entries[0].Name() != allocLock {
		t.Errorf("state dir after Delete: %v, want only %s", entries, allocLock)
	}
}

func TestNewTouchesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	p, err := New("local", Config{StateDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if exists(dir) {
		t.Error("New created the state dir")
	}
	cat := p.Catalog()
	if cat.Type != "local" || len(cat.Hosts) != 1 || cat.Hosts[0] != (providers.Host{Name: "local", MaxConcurrentOps: 2}) ||
		cat.Limits["addresses"] != 253 {
		t.Errorf("Catalog = %+v", cat)
	}
	// Reads of a state dir that does not exist yet answer without creating it.
	if list, err := p.List(ctxT(t)); err != nil || len(list) != 0 {
		t.Errorf("List = %v, %v", list, err)
	}
	if _, err := p.Get(ctxT(t), "local/egress-x"); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("Get = %v, want ErrNotFound", err)
	}
	if exists(dir) {
		t.Error("a read created the state dir")
	}
}

func TestSurvivesReopen(t *testing.T) {
	p := newProvider(t, testConfig(t, 5))
	inst := mustCreate(t, p, request("egress-reopen", freePort(t)))
	before := proxies(p, inst.Name)

	q := reopen(t, p)
	got := mustGet(t, q, inst.ID)
	if got.State != providers.StateRunning || got.Address != inst.Address || got.Port != inst.Port {
		t.Errorf("reopened Get = %+v, want %+v", got, inst)
	}
	again, err := q.Create(ctxT(t), request("egress-reopen", inst.Port))
	if err != nil || again.Address != inst.Address {
		t.Fatalf("reopened Create = %+v, %v", again, err)
	}
	if after := proxies(q, inst.Name); len(after) != 1 || after[0] != before[0] {
		t.Errorf("proxies before %v, after %v: Create of a running instance must not restart it", before, after)
	}
}

func TestEveryInstanceHasItsOwnAddress(t *testing.T) {
	p := newProvider(t, testConfig(t, 2))
	port := freePort(t)
	a := mustCreate(t, p, request("egress-a", port))
	// A different port does not make an address free for a second instance.
	b := mustCreate(t, p, request("egress-b", port+1))
	if a.Address == b.Address {
		t.Fatalf("two instances on %s", a.Address)
	}
	_, err := p.Create(ctxT(t), request("egress-c", port))
	if !errors.Is(err, providers.ErrQuota) {
		t.Fatalf("third Create in a pool of two: %v, want ErrQuota", err)
	}
	if _, err := p.Get(ctxT(t), "local/egress-c"); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("Get after a Create that failed: %v, want ErrNotFound", err)
	}
	if err := p.Delete(ctxT(t), a.ID); err != nil {
		t.Fatal(err)
	}
	c := mustCreate(t, p, request("egress-c", port))
	if c.Address != a.Address {
		t.Errorf("freed address %s not reused, got %s", a.Address, c.Address)
	}
}

func TestBusyAddressIsSkipped(t *testing.T) {
	cfg := testConfig(t, 3)
	p := newProvider(t, cfg)
	port := freePort(t)
	first, _, _ := strings.Cut(cfg.Addresses[0], "-")
	ln, err := net.Listen("tcp", net.JoinHostPort(first, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	inst := mustCreate(t, p, request("egress-skip", port))
	if inst.Address == first {
		t.Errorf("took %s, where something else listens", first)
	}
}

func TestBindSourceUsesInstanceAddress(t *testing.T) {
	cfg := testConfig(t, 5)
	yes := true
	cfg.BindSource = &yes
	p := newProvider(t, cfg)
	inst := mustCreate(t, p, request("egress-src", freePort(t)))
	srv := upstream(t) // on 127.0.0.1
	status, body := through(t, inst, nil, srv.URL)
	if status != 200 || body != inst.Address {
		t.Errorf("upstream saw the request from %q (status %d), want the instance's %s", body, status, inst.Address)
	}
}

func TestAuthAddedAndRemovedRestarts(t *testing.T) {
	p := newProvider(t, testConfig(t, 5))
	req := request("egress-auth", freePort(t))
	inst := mustCreate(t, p, req)
	srv := upstream(t)
	if status, _ := through(t, inst, nil, srv.URL); status != 200 {
		t.Fatalf("no auth: %d", status)
	}

	req.Auth = &providers.Auth{Username: "u", Password: "one"}
	inst, err := p.Create(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := through(t, inst, nil, srv.URL); status != 407 {
		t.Errorf("auth added: without credentials %d, want 407", status)
	}
	before := proxies(p, req.Name)

	// A new password reaches the running proxy without a restart.
	req.Auth = &providers.Auth{Username: "u", Password: "two"}
	if inst, err = p.Create(ctxT(t), req); err != nil {
		t.Fatal(err)
	}
	if status, _ := through(t, inst, url.UserPassword("u", "one"), srv.URL); status != 407 {
		t.Errorf("old password: %d, want 407", status)
	}
	if status, _ := through(t, inst, url.UserPassword("u", "two"), srv.URL); status != 200 {
		t.Errorf("new password: %d, want 200", status)
	}
	if after := proxies(p, req.Name); len(after) != 1 || after[0] != before[0] {
		t.Errorf("password rotation restarted the proxy: %v → %v", before, after)
	}

	// So does a lease key in place of the password (auth.mode lease): from then on only
	// lease tokens signed with it pass.
	key := leaseauth.NewMaster().ProxyKey("p-auth")
	req.Auth = &providers.Auth{LeaseKey: providers.Secret(key.FileLine())}
	if inst, err = p.Create(ctxT(t), req); err != nil {
		t.Fatal(err)
	}
	if status, _ := through(t, inst, url.UserPassword("u", "two"), srv.URL); status != 407 {
		t.Errorf("the password under a lease key: %d, want 407", status)
	}
	if status, _ := through(t, inst, url.UserPassword(key.Sign("p-auth.0.0123456789abcdef", time.Now().Add(time.Minute))), srv.URL); status != 200 {
		t.Errorf("a lease token: %d, want 200", status)
	}
	if after := proxies(p, req.Name); len(after) != 1 || after[0] != before[0] {
		t.Errorf("switching to a lease key restarted the proxy: %v → %v", before, after)
	}

	req.Auth = nil
	if inst, err = p.Create(ctxT(t), req); err != nil {
		t.Fatal(err)
	}
	if status, _ := through(t, inst, nil, srv.URL); status != 200 {
		t.Errorf("auth removed: %d, want 200", status)
	}
	if exists(filepath.Join(p.dir(req.Name), authFile)) {
		t.Error("auth file left after auth was removed")
	}
}

// TestClusterChaos, 2026-12-04: a proxy deleted and declared again before its instance was
// deleted met that instance under its name, built for an older port; returned as it was, the
// proxy stayed Ready on the old port with a status saying it followed the new spec.
func TestCreateOfTheNameWithAnotherPortMovesIt(t *testing.T) {
	p := newProvider(t, testConfig(t, 5))
	req := request("egress-moved", freePort(t))
	first := mustCreate(t, p, req)
	srv := upstream(t)
	req.Port = freePort(t)
	inst, err := p.Create(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Port != req.Port || inst.Address != first.Address || inst.ID != first.ID {
		t.Fatalf("created again with port %d: %+v (first %+v)", req.Port, inst, first)
	}
	if status, _ := through(t, inst, nil, srv.URL); status != 200 {
		t.Errorf("through the new port: %d", status)
	}
	if got, err := reopen(t, p).Get(ctxT(t), inst.ID); err != nil || got.Port != req.Port {
		t.Errorf("read back: %+v %v, want port %d", got, err, req.Port)
	}
	if n := len(proxies(p, req.Name)); n != 1 {
		t.Errorf("%d processes for the instance, want 1", n)
	}
}

func TestCreateOfAnotherUIDsNameIsPermanent(t *testing.T) {
	p := newProvider(t, testConfig(t, 5))
	req := request("egress-mine", freePort(t))
	mustCreate(t, p, req)
	req.UID = "someone-else"
	if _, err := p.Create(ctxT(t), req); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Create with another uid: %v, want ErrPermanent", err)
	}
}

func TestInvalidRequestsArePermanent(t *testing.T) {
	p := newProvider(t, testConfig(t, 5))
	for name, mutate := range map[string]func(*providers.CreateRequest){
		"unknown host":  func(r *providers.CreateRequest) { r.Host = "elsewhere" },
		"no uid":        func(r *providers.CreateRequest) { r.UID = "" },
		"port zero":     func(r *providers.CreateRequest) { r.Port = 0 },
		"upper case":    func(r *providers.CreateRequest) { r.Name = "Egress-x" },
		"dot dot":       func(r *providers.CreateRequest) { r.Name = ".." },
		"colon in user": func(r *providers.CreateRequest) { r.Auth = &providers.Auth{Username: "a:b", Password: "p"} },
		"bad lease key": func(r *providers.CreateRequest) { r.Auth = &providers.Auth{LeaseKey: "p:lease:short"} },
	} {
		req := request("egress-invalid", 3128)
		mutate(&req)
		if _, err := p.Create(ctxT(t), req); !errors.Is(err, providers.ErrPermanent) {
			t.Errorf("%s: %v, want ErrPermanent", name, err)
		}
	}
	if entries, _ := os.ReadDir(p.stateDir); len(entries) != 0 {
		t.Errorf("an invalid request touched the state dir: %v", entries)
	}
}

func TestStatesFromDisk(t *testing.T) {
	p := newProvider(t, testConfig(t, 5))
	plant := func(name, content string) {
		dir := p.dir(name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if content != "" {
			os.WriteFile(filepath.Join(dir, metaFile), []byte(content), 0o600)
		}
	}
	good := func(name string) string {
		data, _ := json.Marshal(meta{V: 1, ID: idOf(name), Name: name, UID: "u", Installation: "i", Managed: true,
			CreatedAt: time.Now().UTC(), Address: "127.77.254.1", Port: 3128})
		return string(data)
	}
	plant("egress-starting", good("egress-starting"))
	plant("egress-dead", good("egress-dead"))
	os.WriteFile(p.pidPath("egress-dead"), []byte("999999999\n"), 0o644)
	plant("egress-reused", good("egress-reused"))
	os.WriteFile(p.pidPath("egress-reused"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644) // alive, not ours
	plant("egress-corrupt", "{not json")
	plant("egress-empty", "")
	plant("egress-misnamed", good("egress-other"))

	for name, want := range map[string]providers.State{
		"egress-starting": providers.StateProvisioning,
		"egress-dead":     providers.StateStopped,
		"egress-reused":   providers.StateStopped,
	} {
		if got := mustGet(t, p, idOf(name)); got.State != want || got.Address != "" {
			t.Errorf("%s: %s %q, want %s without address", name, got.State, got.Address, want)
		}
	}
	for _, name := range []string{"egress-corrupt", "egress-empty", "egress-misnamed"} {
		if _, err := p.Get(ctxT(t), idOf(name)); !errors.Is(err, providers.ErrTransient) {
			t.Errorf("Get(%s) = %v, want ErrTransient", name, err)
		}
	}
	list, err := p.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, inst := range list {
		names = append(names, inst.Name)
	}
	if strings.Join(names, ",") != "egress-dead,egress-reused,egress-starting" {
		t.Errorf("List names %v", names)
	}

	// A dead instance's Delete removes it; so does a corrupt one's.
	for _, name := range []string{"egress-dead", "egress-corrupt"} {
		if err := p.Delete(ctxT(t), idOf(name)); err != nil {
			t.Errorf("Delete(%s): %v", name, err)
		}
		if exists(p.dir(name)) {
			t.Errorf("%s still on disk", name)
		}
	}
}

func TestCheck(t *testing.T) {
	p := newProvider(t, testConfig(t, 3))
	got := p.Check(ctxT(t))
	if len(got) != 1 || got[0].Name != "local" || !got[0].Ready || got[0].Reason != "Reachable" {
		t.Errorf("Check = %+v", got)
	}
	cfg := testConfig(t, 3)
	cfg.Addresses = []string{"198.51.100.1-198.51.100.3"} // TEST-NET-2: documentation only
	for _, a := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
		if canListen(netip.MustParseAddr(a), 0) == nil {
			t.Skipf("this host has %s", a)
		}
	}
	p = newProvider(t, cfg)
	got = p.Check(ctxT(t))
	if len(got) != 1 || got[0].Ready || got[0].Reason != "Unreachable" || got[0].Message == "" {
		t.Errorf("Check with foreign addresses = %+v", got)
	}
	if _, err := p.Create(ctxT(t), request("egress-foreign", freePort(t))); !errors.Is(err, providers.ErrQuota) {
		t.Errorf("Create with foreign addresses = %v, want ErrQuota", err)
	}
}

// A freed address in quarantine is not handed out again: the next instance takes another,
// and with only quarantined addresses free, Create fails with ErrQuota saying so. Out of
// quarantine, the address is free again (the lowest first, as before).
func TestQuarantinedAddressIsNotHandedOut(t *testing.T) {
	p := newProvider(t, testConfig(t, 2))
	port := freePort(t)
	a := mustCreate(t, p, request("egress-burned", port))
	if err := p.Delete(ctxT(t), a.ID); err != nil {
		t.Fatal(err)
	}
	burned := netip.MustParsePrefix(a.Address + "/32")
	req := request("egress-next", port)
	req.Avoid = []netip.Prefix{burned}
	b := mustCreate(t, p, req)
	if b.Address == a.Address {
		t.Fatalf("the quarantined address %s was handed out again", a.Address)
	}
	req = request("egress-third", port)
	req.Avoid = []netip.Prefix{burned}
	_, err := p.Create(ctxT(t), req)
	if !errors.Is(err, providers.ErrQuota) || !strings.Contains(err.Error(), "1 in quarantine") {
		t.Fatalf("Create with only a quarantined address free: %v, want ErrQuota naming the quarantine", err)
	}
	c := mustCreate(t, p, request("egress-third", port)) // the quarantine is over
	if c.Address != a.Address {
		t.Errorf("out of quarantine, %s was not handed out, got %s", a.Address, c.Address)
	}
}
