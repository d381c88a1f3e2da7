package gcp

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/gcp/gcptest"
)

// An insert whose operation fails after the insert call returned is read by Get: quota is
// Quota with the service's quota message, a stockout is Quota saying "stockout", and neither
// makes more than the one instance the attempt inserted.
func TestAsyncInsertFailuresAreReadByGet(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault gcptest.Fault
		want  []string // in the error
	}{
		{"quota", gcptest.FaultQuotaAsync, []string{"QUOTA_EXCEEDED", "Quota 'CPUS' exceeded"}},
		{"stockout", gcptest.FaultStockout, []string{"stockout", "ZONE_RESOURCE_POOL_EXHAUSTED", "does not have enough resources"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The failure comes after the instance has been PROVISIONING a while (stockout)
			// or before it is visible (quota): both later than the insert's answer.
			w := newWorld(t, gcptest.Options{Delays: gcptest.Delays{Pending: 50e6, Provisioning: 300e6, Staging: 20e6}})
			p := w.provider(t, nil)
			w.sim.FailInserts(zoneA, c.fault)
			req := w.request("async-" + c.name)
			req.Attempt = "op-1"
			inst, err := p.Create(context.Background(), req)
			if err != nil {
				if c.fault == gcptest.FaultStockout {
					t.Fatalf("Create: %v, want the insert accepted (the stockout comes later)", err)
				}
				checkAsyncError(t, err, c.want) // quota failed within Create's wait: same answer
			} else {
				err = waitError(t, p, inst.ID)
				checkAsyncError(t, err, c.want)
			}
			// Get keeps saying so (it reads the operation, not memory), never NotFound.
			_, again := p.Get(context.Background(), idFor(zoneA, req))
			checkAsyncError(t, again, c.want)
			if n := w.sim.Inserted(); n != 1 {
				t.Errorf("the simulator made %d instances for one attempt, want 1", n)
			}
			// The same attempt again (a redelivered op) inserts nothing: its requestId
			// answers the failed operation.
			_, err = p.Create(context.Background(), req)
			checkAsyncError(t, err, c.want)
			if n := w.sim.Inserted(); n != 1 {
				t.Errorf("a retried attempt made instance %d, want none more", n)
			}
			// The next attempt tries again for real, and succeeds now.
			req.Attempt = "op-2"
			inst, err = p.Create(context.Background(), req)
			if err != nil {
				t.Fatalf("next attempt: %v", err)
			}
			settle(t, p, inst.ID)
			if n := w.sim.Inserted(); n != 2 {
				t.Errorf("after the next attempt the simulator made %d instances, want 2", n)
			}
		})
	}
}

// waitError polls Get until it fails.
func waitError(t *testing.T, p providers.Provider, id string) error {
	t.Helper()
	for range 200 {
		inst, err := p.Get(context.Background(), id)
		if err != nil {
			return err
		}
		if inst.State != providers.StateProvisioning {
			t.Fatalf("Get = %s, want Provisioning until the insert fails", inst.State)
		}
		sleep(20)
	}
	t.Fatal("the insert never failed")
	return nil
}

func checkAsyncError(t *testing.T, err error, want []string) {
	t.Helper()
	if !errors.Is(err, providers.ErrQuota) {
		t.Fatalf("error %v: class %v, want Quota", err, providers.ClassOf(err))
	}
	var oe *opError
	if !errors.As(err, &oe) {
		t.Errorf("error %v does not keep the operation's error", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// A synchronous quota refusal (403 quotaExceeded) is Quota too, and a 429 burst on insert is
// Transient and inserts nothing: the client does not retry it and neither does Create.
func TestSynchronousInsertRefusals(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	p := w.provider(t, nil)
	w.sim.FailInserts(zoneA, gcptest.FaultQuota)
	_, err := p.Create(context.Background(), w.request("sync-quota"))
	if !errors.Is(err, providers.ErrQuota) || !strings.Contains(err.Error(), "Quota 'CPUS' exceeded") {
		t.Errorf("403 quotaExceeded: %v, want Quota with the message", err)
	}
	w.sim.RateLimit(1) // the firewall get sees it first, then a second burst hits the insert
	_, err = p.Create(context.Background(), w.request("sync-429"))
	if !errors.Is(err, providers.ErrTransient) {
		t.Errorf("429: %v, want Transient", err)
	}
	if n := w.sim.Inserted(); n != 0 {
		t.Errorf("the simulator made %d instances, want 0", n)
	}
}
