package leaser_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

func (r *rig) report(req events.ReportRequest) events.ReportReply {
	r.t.Helper()
	rep := r.call(events.LeaseReportSubject, req)
	if rep.code != 0 {
		r.t.Fatalf("report %+v: %d %s", req, rep.code, rep.err.Message)
	}
	var rr events.ReportReply
	if err := json.Unmarshal(rep.body, &rr); err != nil {
		r.t.Fatal(err)
	}
	return rr
}

// A block for target A keeps the proxy from A during the cooldown, not from B; the report
// may be served by one replica and the next acquire by another.
func TestLeaseReportBlockedCoolsDownOneTarget(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 5})
	r.startLeasers(3)

	l := r.mustAcquire(events.AcquireRequest{Target: "a.example", Holder: "c1"})
	before := time.Now()
	rr := r.report(events.ReportRequest{ID: l.ID, Result: events.ReportBlocked, Target: "a.example", CooldownSeconds: 5})
	if rr.CooldownUntil.Before(before.Add(4*time.Second)) || rr.Released {
		t.Fatalf("report reply %+v", rr)
	}
	// Five seconds of cooldown: the five refusals below must all come before its end, which
	// takes milliseconds on a quiet machine and has seconds to spare on a loaded one.
	for range 5 { // whichever replica answers
		_, rep := r.acquire(events.AcquireRequest{Target: "a.example"})
		want := events.Availability{Matched: 1, Ready: 1, CoolingTarget: 1}
		if rep.code != events.CodeUnavailable || rep.err.Availability == nil {
			t.Fatalf("acquire for the blocked target: %d, want 503", rep.code)
		}
		// The refusal says when the proxy may be granted for the target again.
		got := *rep.err.Availability
		if !got.NextAllowedAt.Equal(rr.CooldownUntil) {
			t.Fatalf("nextAllowedAt %v, want the cooldown's end %v", got.NextAllowedAt, rr.CooldownUntil)
		}
		if got.NextAllowedAt = (time.Time{}); got != want {
			t.Fatalf("acquire for the blocked target: %+v, want %+v", got, want)
		}
	}
	if g := r.mustAcquire(events.AcquireRequest{Target: "b.example"}); g.Proxy != "px-a" {
		t.Fatalf("leased %s for another target", g.Proxy)
	}
	// The cooldown ends on the server's clock.
	eventually(t, 10*time.Second, "the proxy is leased for a.example again", func() bool {
		_, rep := r.acquire(events.AcquireRequest{Target: "a.example"})
		return rep.code == 0
	})
	if time.Since(before) < 5*time.Second {
		t.Fatalf("cooldown of 5s ended after %v", time.Since(before))
	}
}

// A failure keeps the proxy from every target during the cooldown and asks for a probe now,
// on the subject of the proxy's provider and host ("external" for an external proxy).
func TestLeaseReportFailedCoolsDownEveryTargetAndProbes(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 5}, proxy{name: "px-ext", maxLeases: 5, external: true})
	r.startLeasers(2)

	l := r.mustAcquire(events.AcquireRequest{Target: "a.example"})
	if l.Proxy != "px-a" { // by name: nothing else tells them apart yet
		t.Fatalf("leased %s", l.Proxy)
	}
	rr := r.report(events.ReportRequest{ID: l.ID, Result: events.ReportFailed, Target: "a.example", Release: true})
	if !rr.Released || time.Until(rr.CooldownUntil) < 4*time.Minute {
		t.Fatalf("report reply %+v (want released, default cooldown 5m)", rr)
	}
	var ext []events.LeaseGrant
	for _, target := range []string{"", "a.example", "b.example", "c.example", ""} {
		g := r.mustAcquire(events.AcquireRequest{Target: target})
		if g.Proxy != "px-ext" {
			t.Fatalf("%s leased for %q during px-a's cooldown", g.Proxy, target)
		}
		ext = append(ext, g)
	}
	_, rep := r.acquire(events.AcquireRequest{})
	want := events.Availability{Matched: 2, Ready: 2, AtCapacity: 1, CoolingGlobal: 1}
	if rep.code != events.CodeUnavailable || *rep.err.Availability != want {
		t.Fatalf("%d %+v, want 503 %+v", rep.code, rep.err.Availability, want)
	}
	r.report(events.ReportRequest{ID: ext[0].ID, Result: events.ReportFailed})

	wantProbes := map[string]events.ProbeRequest{
		"egress.probe.local.local.px-a": {Proxy: "px-a", Provider: "local", Host: "local", Address: "127.0.0.10", Port: 3128},
		"egress.probe.external.external.px-ext": {Proxy: "px-ext", Provider: events.External, Host: events.External,
			Address: "10.9.9.9", Port: 8080},
	}
	eventually(t, 5*time.Second, "a probe request for each failed proxy", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		found := 0
		for subject, w := range wantProbes {
			if slices.ContainsFunc(r.probes, func(p probe) bool {
				return p.subject == subject && p.Proxy == w.Proxy && p.Provider == w.Provider && p.Host == w.Host &&
					p.Address == w.Address && p.Port == w.Port && p.Reason == "report" && p.V == 1
			}) {
				found++
			}
		}
		return found == len(wantProbes)
	})
}
