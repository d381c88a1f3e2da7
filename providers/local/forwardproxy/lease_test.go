package forwardproxy

import (
	"net/url"
	"path/filepath"
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
