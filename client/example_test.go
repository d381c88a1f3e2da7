package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/nats-io/nats.go"
)

// A crawler leases a proxy in Germany for example.com, fetches through it, reports a block,
// and lets the lease go.
func ExampleClient_Acquire() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc)
	ctx := context.Background()

	lease, err := c.Acquire(ctx, client.AcquireOptions{
		Selector: map[string]string{"geo": "de"},
		Target:   "example.com",
		TTL:      5 * time.Minute,
		Holder:   "crawler-7",
		Sticky:   "session-42",
	})
	var se *client.Error
	if errors.Is(err, client.ErrNoProxy) && errors.As(err, &se) {
		a := se.Availability
		fmt.Printf("wait: %d ready, %d at capacity, %d cooling down for example.com\n", a.Ready, a.AtCapacity, a.CoolingTarget)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())

	// HTTPProxy follows the renewals' URLs: with auth.mode "lease" each carries a new token.
	hc := &http.Client{Transport: &http.Transport{Proxy: lease.HTTPProxy}, Timeout: 30 * time.Second}
	resp, err := hc.Get("https://example.com/")
	if err != nil {
		_, _ = lease.Report(ctx, client.Failed, "example.com", client.AndRelease())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests {
		_, _ = lease.Report(ctx, client.Blocked, "example.com", client.WithCooldown(time.Hour), client.AndRelease())
	}
}

// A long crawl watches for the loss of its lease and switches proxies.
func ExampleLease_Lost() {
	nc, _ := nats.Connect(nats.DefaultURL)
	defer nc.Close()
	c := client.New(nc)
	ctx := context.Background()
	lease, err := c.Acquire(ctx, client.AcquireOptions{Target: "example.com"})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	work := make(chan string)
	for {
		select {
		case <-lease.Lost():
			log.Printf("%v lost: %v", lease, lease.Err()) // %v prints no credentials
			return
		case u, ok := <-work:
			if !ok {
				return
			}
			_ = u // fetch u through lease.CurrentURL()
		}
	}
}
