// Package client is the Go client crawlers use to lease egress proxies from egressd's lease
// service over NATS (docs/leases.md).
//
// A Lease from Client.Acquire renews itself in the background at a third of its TTL until it
// is released; Lost is closed if the service refuses a renewal (the lease expired, or its slot
// was granted to someone else) or if no renewal got through before the TTL ran out. Always
// Release a lease, typically with defer, or its renewals go on.
//
//	nc, _ := nats.Connect(nats.DefaultURL)
//	c := client.New(nc)
//	lease, err := c.Acquire(ctx, client.AcquireOptions{Selector: map[string]string{"geo": "de"}, Target: "example.com"})
//	if errors.Is(err, client.ErrNoProxy) {
//		// nothing free now: err's *client.Error carries the Availability numbers
//	}
//	defer lease.Release(context.Background())
//	// the lease's current http://user:pass@host:port, which renewals may change
//	httpClient := &http.Client{Transport: &http.Transport{Proxy: lease.HTTPProxy}}
//	…
//	if blocked {
//		lease.Report(ctx, client.Blocked, "example.com", client.AndRelease())
//	}
//
// Errors of the service are *Error values; errors.Is matches them against ErrBadRequest,
// ErrNotFound, ErrLost, ErrEnded, ErrNoProxy and ErrInternal. When no lease service runs at all, the
// error wraps nats.ErrNoResponders.
//
// Requests ride out a leaser's restart and a lost reply: a try that failed on the way (no
// responders, a timeout) or that the service answered with its retry hint (ErrInternal, a
// waiting acquire whose replica stopped) is sent again with jittered backoff, within
// WithRetryBudget (DefaultRetryBudget, 15 s) and the context; Retryable says which failures.
// Every acquire carries a request ID (AcquireOptions.RequestID, generated when empty), so the
// service answers all its tries with one lease (docs/leases.md#retries); renew, release and
// report act on a lease ID and are safe to repeat. A refusal is returned at once.
//
// This package imports only the standard library, nats.go and egressd's events.
package client
