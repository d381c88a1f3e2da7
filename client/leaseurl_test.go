package client_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
)

// On a proxy with auth.mode "lease", CurrentURL follows the renewals: the same lease ID, a
// new token expiring with each renewal; URL stays the grant's.
func TestCurrentURLFollowsRenewals(t *testing.T) {
	s, c := startService(t)
	ctx := context.Background()
	if _, err := kvstore.PutJSON(ctx, s.store.Proxies, "px-1", map[string]any{"provider": "local", "maxLeases": 1,
		"auth": map[string]string{"mode": "lease"}}); err != nil {
		t.Fatal(err)
	}
	hasToken := func(l *client.Lease) bool { u, _ := url.Parse(l.URL); return u.User != nil }
	l := acquireSeen(t, ctx, c, client.AcquireOptions{TTL: 3 * time.Second}, hasToken)
	if !hasToken(l) {
		t.Fatal("the lease URL never carried a token")
	}
	defer l.Release(ctx)
	token := func(s string) leaseauth.Token {
		t.Helper()
		u, err := url.Parse(s)
		if err != nil || u.User == nil || u.User.Username() != l.ID {
			t.Fatalf("URL without the lease ID as its user (%v)", err)
		}
		p, _ := u.User.Password()
		tok, err := leaseauth.ParseToken(p)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if l.CurrentURL() != l.URL {
		t.Fatal("before any renewal CurrentURL is not the grant's")
	}
	first := token(l.URL).Expires
	if !within(10*time.Second, 50*time.Millisecond, func() bool { return l.CurrentURL() != l.URL }) {
		t.Fatal("CurrentURL did not change with a renewal")
	}
	if !token(l.CurrentURL()).Expires.After(first) || !token(l.URL).Expires.Equal(first) {
		t.Fatal("the renewal's token does not expire later, or URL changed")
	}
	if u, err := l.HTTPProxy(nil); err != nil || token(u.String()).Expires.Before(token(l.CurrentURL()).Expires) {
		t.Fatalf("HTTPProxy is not the current URL (%v)", err)
	}
}
