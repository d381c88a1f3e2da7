package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestBucketOf(t *testing.T) {
	for subject, want := range map[string]string{
		"$JS.API.CONSUMER.CREATE.KV_proxies.Vb38Lf6D.$KV.proxies.>": "proxies",
		"$JS.API.DIRECT.GET.KV_proxy_status.$KV.proxy_status.p1":    "proxy_status",
		"$JS.API.STREAM.INFO.KV_provider_health":                    "provider_health",
		"$JS.FC.KV_proxy_leases.abc.1":                              "proxy_leases",
		"$KV.cloud_init.squid":                                      "cloud_init",
		"$JS.API.STREAM.INFO.EGRESS_EVENTS":                         "",
		"egress.lease.acquire":                                      "",
	} {
		if got := bucketOf(subject); got != want {
			t.Errorf("bucketOf(%q) = %q, want %q", subject, got, want)
		}
	}
}

// A violation ends the reads of its bucket, with the subject and operation, and no other.
func TestDenialsEndTheReadsOfTheirBucket(t *testing.T) {
	t.Setenv(envUser, "viewer")
	d := newDenials()
	proxies, stopP := d.guard(context.Background(), "proxies")
	defer stopP()
	status, stopS := d.guard(context.Background(), "proxy_status")
	defer stopS()
	for _, err := range []error{
		errors.New("nats: slow consumer"), // not a violation
		fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "$JS.API.CONSUMER.CREATE.KV_proxies.x.$KV.proxies.>" on connection [40]`),
	} {
		d.handle(err)
	}
	var de *deniedError
	if !errors.As(context.Cause(proxies), &de) || de.Bucket != "proxies" || de.Op != "publish" || de.Subject != "$JS.API.CONSUMER.CREATE.KV_proxies.x.$KV.proxies.>" {
		t.Fatalf("proxies' read: cause %v", context.Cause(proxies))
	}
	if want := `permission denied: the NATS user "viewer" may not publish to "$JS.API.CONSUMER.CREATE.KV_proxies.x.$KV.proxies.>"`; de.Error() != want {
		t.Errorf("message %q\nwant    %q", de.Error(), want)
	}
	if status.Err() != nil {
		t.Fatalf("another bucket's read was ended: %v", context.Cause(status))
	}
	d.handle(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "$KV.proxy_status.p1"`))
	if !errors.As(context.Cause(status), &de) || de.Op != "subscribe" {
		t.Fatalf("proxy_status' read: cause %v", context.Cause(status))
	}
}
