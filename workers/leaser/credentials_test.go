package leaser_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/workers/leaser"
)

// With auth.mode "lease", a grant's URL carries the lease ID and a token the proxy's key
// verifies, expiring with the lease; a renewal keeps the ID and hands out a fresh token, the
// old one still valid until its own expiry. Neither the master, the proxy's key nor a token
// reaches an event or a log line.
func TestLeaseModeURLCarriesASignedToken(t *testing.T) {
	master := leaseauth.NewMaster()
	r := newRig(t, func(c *leaser.Config) { c.LeaseMaster = master })
	r.seed(proxy{name: "px-lease", maxLeases: 2}, proxy{name: "px-other", maxLeases: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"px-lease", "px-other"} {
		spec := map[string]any{"provider": "local", "maxLeases": 2, "auth": map[string]string{"mode": "lease"}}
		if name == "px-other" {
			spec = map[string]any{"provider": "local", "maxLeases": 0} // never leased
		}
		if _, err := kvstore.PutJSON(ctx, r.store.Proxies, name, spec); err != nil {
			t.Fatal(err)
		}
	}
	r.startLeasers(2)

	key := master.ProxyKey("px-lease")
	creds := func(g events.LeaseGrant) (string, string) {
		t.Helper()
		u, err := url.Parse(g.URL)
		if err != nil || u.User == nil {
			t.Fatalf("grant URL has no credentials (%v)", err)
		}
		pass, _ := u.User.Password()
		if u.User.Username() != g.ID || u.Host != "127.0.0.10:3128" {
			t.Fatalf("URL user %q host %s, want the lease ID %s at 127.0.0.10:3128", u.User.Username(), u.Host, g.ID)
		}
		if tok, err := leaseauth.ParseToken(pass); err != nil || !tok.Expires.Equal(g.ExpiresAt.Truncate(time.Second)) {
			t.Fatalf("token expires %v (%v), want the lease's %v", tok.Expires, err, g.ExpiresAt)
		}
		return u.User.Username(), pass
	}
	g := r.mustAcquire(events.AcquireRequest{Holder: "c1", TTLSeconds: 60})
	user, pass := creds(g)
	now := time.Now()
	if err := key.Verify(user, pass, now); err != nil {
		t.Fatalf("the proxy's key refuses the grant's token: %v", err)
	}
	if err := master.ProxyKey("px-other").Verify(user, pass, now); err == nil {
		t.Fatal("another proxy's key accepts the token")
	}

	rn, rep := r.renew(g.ID, 120)
	if rep.code != 0 || rn.ID != g.ID {
		t.Fatalf("renew: %d, ID %s", rep.code, rn.ID)
	}
	user2, pass2 := creds(rn)
	if pass2 == pass {
		t.Fatal("the renewal handed out the same token")
	}
	if err := key.Verify(user2, pass2, now.Add(100*time.Second)); err != nil {
		t.Fatalf("the renewed token: %v", err)
	}
	if err := key.Verify(user, pass, now); err != nil {
		t.Fatalf("the grant's token before its own expiry: %v", err)
	}
	if err := key.Verify(user, pass, now.Add(100*time.Second)); err == nil {
		t.Fatal("the grant's token outlives its own expiry")
	}
	r.release(g.ID)

	secrets := []string{string(master.Encode()), strings.Split(strings.TrimSpace(key.FileLine()), ":")[4], pass, pass2}
	eventually(t, 10*time.Second, "the release event", func() bool {
		for _, ev := range r.seenEvents() {
			if ev.Reason == events.ReasonReleased {
				return true
			}
		}
		return false
	})
	r.mu.Lock()
	for _, b := range r.events {
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("an event carries a secret: %s", b)
			}
		}
	}
	r.mu.Unlock()
	logs := r.logs.String()
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Error("a log line carries a secret")
		}
	}
	if !strings.Contains(logs, "lease granted") {
		t.Error("the debug log is not being captured")
	}
}
