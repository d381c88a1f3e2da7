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
	var l *client.Lease
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if l, err = c.Acquire(ctx, client.AcquireOptions{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if u, _ := l.Credentials(); u != "" || time.Now().After(deadline) {
			break
		}
		_ = l.Release(ctx) // the service had not seen the auth yet
	}
	defer func() { _ = l.Release(ctx) }()
	if u, p := l.Credentials(); u != "crawler" || p != "s3cret" {
		t.Fatalf("credentials %q %q, want crawler s3cret", u, p)
	}
	if l.Egress == nil || l.Egress.Provider != "local" || l.Egress.Target != "local" || l.Egress.Attributes["geo"] != "de" {
		t.Fatalf("egress %+v", l.Egress)
	}
}
