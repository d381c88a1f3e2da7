package fleet

import (
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

func TestJudge(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const interval = 30 * time.Second // overdue after 65 s
	const addr = "127.0.0.2:3128"
	status := func(phase events.Phase, addressAt time.Time) *events.ProxyStatus {
		return &events.ProxyStatus{Phase: phase, IP: "127.0.0.2", Port: 3128, AddressAt: addressAt, UpdatedAt: ago(time.Second)}
	}
	healthy := func(at string, probed time.Time) *events.ProxyHealth {
		return &events.ProxyHealth{Address: at, Healthy: true, ConsecutiveSuccesses: 1, SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: probed}
	}
	for _, c := range []struct {
		name     string
		st       *events.ProxyStatus
		address  string
		h        *events.ProxyHealth
		interval time.Duration
		reason   events.Reason // recorded by the reconciler

		healthy    Health
		overdue    bool
		wantReason events.Reason
	}{
		{name: "fresh verdict at the current address", st: status(events.PhaseReady, ago(time.Hour)), address: addr,
			h: healthy(addr, ago(10*time.Second)), interval: interval, healthy: HealthTrue},
		{name: "failing verdict keeps the reconciler's reason", st: status(events.PhaseUnhealthy, ago(time.Hour)), address: addr,
			h:        &events.ProxyHealth{Address: addr, ConsecutiveFailures: 3, FailureThreshold: 3, LastProbeAt: ago(90 * time.Second)},
			interval: interval, reason: events.ReasonProbeFailing, healthy: HealthUnknown, overdue: true, wantReason: events.ReasonProbeFailing},
		{name: "failures below the threshold are no verdict", st: status(events.PhaseRunning, ago(time.Minute)), address: addr,
			h:        &events.ProxyHealth{Address: addr, ConsecutiveFailures: 1, FailureThreshold: 3, LastProbeAt: ago(time.Second)},
			interval: interval, healthy: HealthUnknown},
		{name: "a verdict about a previous address", st: status(events.PhaseRunning, ago(10*time.Second)), address: addr,
			h: healthy("127.0.0.9:3128", ago(time.Second)), interval: interval, healthy: HealthUnknown},
		{name: "a previous address long unprobed is overdue", st: status(events.PhaseRunning, ago(2*time.Minute)), address: addr,
			h: healthy("127.0.0.9:3128", ago(time.Second)), interval: interval, healthy: HealthUnknown, overdue: true, wantReason: events.ReasonProbeOverdue},
		{name: "a stale verdict is none, and overdue", st: status(events.PhaseReady, ago(time.Hour)), address: addr,
			h: healthy(addr, ago(66*time.Second)), interval: interval, healthy: HealthUnknown, overdue: true, wantReason: events.ReasonProbeOverdue},
		{name: "just inside the bound", st: status(events.PhaseReady, ago(time.Hour)), address: addr,
			h: healthy(addr, ago(64*time.Second)), interval: interval, healthy: HealthTrue},
		{name: "a longer interval moves the bound", st: status(events.PhaseReady, ago(time.Hour)), address: addr,
			h: healthy(addr, ago(2*time.Minute)), interval: time.Minute, healthy: HealthTrue},
		{name: "never probed, address new", st: status(events.PhaseRunning, ago(30*time.Second)), address: addr,
			interval: interval, healthy: HealthUnknown},
		{name: "never probed, address old", st: status(events.PhaseRunning, ago(70*time.Second)), address: addr,
			interval: interval, healthy: HealthUnknown, overdue: true, wantReason: events.ReasonProbeOverdue},
		{name: "no AddressAt: UpdatedAt", st: &events.ProxyStatus{Phase: events.PhaseRunning, IP: "127.0.0.2", Port: 3128, UpdatedAt: ago(80 * time.Second)},
			address: addr, interval: interval, healthy: HealthUnknown, overdue: true, wantReason: events.ReasonProbeOverdue},
		{name: "a probe before the address reappeared is of the old instance", st: status(events.PhaseReady, ago(10*time.Second)), address: addr,
			h: healthy(addr, ago(80*time.Second)), interval: interval, healthy: HealthUnknown},
		{name: "a fresh verdict from before the address reappeared is a predecessor's", st: status(events.PhaseReady, ago(10*time.Second)), address: addr,
			h: healthy(addr, ago(20*time.Second)), interval: interval, healthy: HealthUnknown},
		{name: "a predecessor's verdict, spec not readable", st: status(events.PhaseReady, ago(10*time.Second)), address: addr,
			h: healthy(addr, ago(20*time.Second)), healthy: HealthUnknown},
		{name: "external: overdue replaces ExternalEndpoint", st: status(events.PhaseReady, ago(time.Hour)), address: addr,
			h: healthy(addr, ago(5*time.Minute)), interval: interval, reason: events.ReasonExternalEndpoint, healthy: HealthUnknown, overdue: true, wantReason: events.ReasonProbeOverdue},
		{name: "spec not readable: not judged", st: status(events.PhaseReady, ago(time.Hour)), address: addr,
			h: healthy(addr, ago(5*time.Minute)), healthy: HealthTrue},
		{name: "teardown: not judged", st: &events.ProxyStatus{Phase: events.PhaseRunning, IP: "127.0.0.2", Port: 3128, Teardown: events.ReasonSpecChanged, AddressAt: ago(time.Hour)},
			address: addr, interval: interval, healthy: HealthUnknown},
		// A draining member still carries leases: it is probed and judged like a Ready one.
		{name: "Draining: judged at its address", st: status(events.PhaseDraining, ago(time.Hour)), address: addr,
			h: healthy(addr, ago(10*time.Second)), interval: interval, healthy: HealthTrue},
		{name: "Draining: overdue", st: status(events.PhaseDraining, ago(time.Hour)), address: addr,
			h: healthy(addr, ago(5*time.Minute)), interval: interval, healthy: HealthUnknown, overdue: true, wantReason: events.ReasonProbeOverdue},
		{name: "Draining and failing: the reconciler's reason kept", st: status(events.PhaseDraining, ago(time.Hour)), address: addr,
			h:        &events.ProxyHealth{Address: addr, ConsecutiveFailures: 3, FailureThreshold: 3, LastProbeAt: ago(5 * time.Second)},
			interval: interval, reason: events.ReasonProbeFailing, healthy: HealthFalse, wantReason: events.ReasonProbeFailing},
		{name: "Replacing: not judged", st: status(events.PhaseReplacing, ago(time.Hour)), address: addr, interval: interval, healthy: HealthUnknown},
		{name: "no address", st: &events.ProxyStatus{Phase: events.PhaseRunning, AddressAt: ago(time.Hour)}, interval: interval, healthy: HealthUnknown},
		{name: "no status (spec only)", interval: interval, healthy: HealthUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Row{Status: c.st, Address: c.address, Reason: c.reason, interval: c.interval}
			judge(r, c.h, now)
			if r.Healthy != c.healthy || r.ProbeOverdue != c.overdue || r.Reason != c.wantReason {
				t.Errorf("healthy %s, overdue %t, reason %q; want %s, %t, %q", r.Healthy, r.ProbeOverdue, r.Reason, c.healthy, c.overdue, c.wantReason)
			}
		})
	}
}
