package reconciler

import (
	"fmt"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
)

// A provider target whose check fails receives no creates: a create there can only fail, and
// a failing one costs an op, a retry and, on a cloud, an API call that counts against its
// limits. A proxy placed by rendezvous goes to a healthy target instead; one pinned to the
// failing target (placement.zone), or whose provider has no healthy target, waits with
// reason ProviderUnhealthy and is created once the check passes again. A check older than
// Policy.TargetCheckStale holds nothing back: its checker may be gone.

// targetDown reports whether host's latest check failed and is recent, and why.
func (d *decider) targetDown(host string) (string, bool) {
	c, ok := d.in.Targets[host]
	if !ok || c.Ready || (d.p.TargetCheckStale > 0 && d.now.Sub(c.CheckedAt) >= d.p.TargetCheckStale) {
		return "", false
	}
	msg := fmt.Sprintf("provider target %s of %s fails its check (%s", host, d.in.Spec.Provider, c.Reason)
	if c.Message != "" {
		msg += ": " + c.Message
	}
	return msg + "); no create is sent there until it passes", true
}

// healthy is hosts without those whose check fails, or all of them when none passes: a proxy
// then waits on its own target (holdCreate).
func (d *decider) healthy(hosts []string) []string {
	out := slices.DeleteFunc(slices.Clone(hosts), func(h string) bool { _, down := d.targetDown(h); return down })
	if len(out) == 0 {
		return hosts
	}
	return out
}

// holdCreate keeps a create from a failing target: the proxy waits with the reason, and is
// decided again when the check changes (the leader re-decides the provider's proxies) or
// when the check grows stale.
func (d *decider) holdCreate(host string) bool {
	msg, down := d.targetDown(host)
	if !down {
		return false
	}
	d.st.Reason, d.st.Message = events.ReasonProviderUnhealthy, msg
	if d.p.TargetCheckStale > 0 {
		d.wakeAt(d.in.Targets[host].CheckedAt.Add(d.p.TargetCheckStale))
	}
	return true
}

// rateLimited keeps a create back while the provider's create-rate limit is used up: the
// proxy waits with reason RateLimited, saying when, and is decided again then.
func (d *decider) rateLimited() bool {
	if !d.in.CreateAt.After(d.now) {
		return false
	}
	d.st.Reason = events.ReasonRateLimited
	d.st.Message = fmt.Sprintf("the create-rate limit of provider %s is used up; the next create may go at %s",
		d.in.Spec.Provider, d.in.CreateAt.UTC().Format(time.RFC3339))
	d.wakeAt(d.in.CreateAt)
	return true
}
