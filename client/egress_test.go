package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/kvstore"
)

// A lease says where it exits and hands its credentials out as fields, following renewals.
func TestLeaseEgressAndCredentials(t *testing.T) {
	s, c := startService(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kvstore.PutJSON(ctx, s.store.Proxies, "px-1", map[string]any{"provider": "local", "maxLeases": 1,
		"attributes": map[string]string{"geo": "de"}, "auth": map[string]string{"username": "crawler", "password": "s3cret"}}); err != nil {
		t.Fatal(err)
	}
	l := acquireSeen(t, ctx, c, client.AcquireOptions{TTL: time.Minute}, func(l *client.Lease) bool {
		u, _ := l.Credentials()
		return u != ""
	})
	defer func() { _ = l.Release(ctx) }()
	if u, p := l.Credentials(); u != "crawler" || p != "s3cret" {
		t.Fatalf("credentials %q %q, want crawler s3cret", u, p)
	}
	if l.Egress == nil || l.Egress.Provider != "local" || l.Egress.Target != "local" || l.Egress.Attributes["geo"] != "de" {
		t.Fatalf("egress %+v", l.Egress)
	}
}
