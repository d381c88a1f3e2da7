package events

import (
	"fmt"
	"strings"
	"time"
)

// Summary says in one line what an event means, so `egressd events` and the status page read
// alike.
func (ev Event) Summary() string {
	what := ""
	switch {
	case ev.Kind == KindPhase:
		what = fmt.Sprintf("%s → %s", orDash(string(ev.From)), ev.Phase)
		if ev.Reason != "" {
			what += " (" + string(ev.Reason) + ")"
		}
	case ev.Op != nil:
		r := ev.Op
		what = fmt.Sprintf("%s on %s/%s attempt %d", r.Kind, r.Provider, r.Host, r.Attempt)
		switch {
		case r.Kind == OpDelete && r.ErrorClass == ClassNotFound:
			what += ": gone"
		case r.ErrorClass != ClassNone:
			what += ": " + string(r.ErrorClass)
		default:
			what += ": ok"
		}
		if r.Instance != nil && r.Instance.Address != "" {
			what += fmt.Sprintf(" (%s %s:%d)", r.Instance.State, r.Instance.Address, r.Instance.Port)
		}
	case ev.Health != nil:
		what = fmt.Sprintf("%s at %s", ev.Reason, ev.Health.Address)
	case ev.Lease != nil:
		what = fmt.Sprintf("lease %s %s", ev.Lease.ID, ev.Reason)
		if ev.Lease.Holder != "" {
			what += " by " + ev.Lease.Holder
		}
		if ev.Lease.Target != "" {
			what += " for " + ev.Lease.Target
		}
	case ev.GC != nil && ev.Reason == ReasonLifetimeExceeded:
		what = fmt.Sprintf("%s: deleted %s (uid %s), its lifetime ended at %s", ev.Reason, ev.GC.ID, orDash(ev.GC.UID),
			ev.GC.ExpiresAt.UTC().Format(time.RFC3339))
	case ev.GC != nil:
		what = fmt.Sprintf("deleted orphan %s (uid %s)", ev.GC.ID, orDash(ev.GC.UID))
	case ev.Target != nil:
		ready := "not ready"
		if ev.Target.Ready {
			ready = "ready"
		}
		what = fmt.Sprintf("target %s %s: %s", ev.Target.Target, ready, ev.Target.Reason)
	case ev.Prober != nil:
		p := ev.Prober
		what = fmt.Sprintf("prober %s %s: oldest waiting probe %.1fs late, %d of %d proxies waiting, concurrency %d",
			p.Worker, ev.Reason, p.LagSeconds, p.Backlog, p.Owned, p.Concurrency)
	case ev.Pool != nil:
		// The controller's message names the member as a rule; what it leaves out of the
		// detail is added, so the line is whole without repeating itself.
		p := ev.Pool
		what = string(ev.Reason)
		if p.Member != "" && !strings.Contains(ev.Message, p.Member) {
			what = p.Member + " " + what
		}
		if p.Successor != "" && !strings.Contains(ev.Message, p.Successor) {
			what += " (successor " + p.Successor + ")"
		}
		switch {
		case p.Leases <= 0 || strings.Contains(ev.Message, " lease"):
		case p.Leases == 1:
			what += ", 1 lease held"
		default:
			what += fmt.Sprintf(", %d leases held", p.Leases)
		}
	default:
		what = string(ev.Reason)
	}
	// A gc event's message repeats its instance; every other message adds the why.
	if ev.Message != "" && ev.Kind != KindGC {
		if what == "" {
			return ev.Message
		}
		what += " — " + ev.Message
	}
	return orDash(what)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Age prints how long ago t was, the way kubectl does: 45s, 12m, 3h, 5d; "-" for zero.
func Age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
