package reconciler

import (
	"cmp"
	"time"

	"github.com/egressd/egressd/events"
)

// Boot times (issue 23 item 4): a proxy's boot is from when the reconciler first saw its spec
// (its status's createdAt, the spec's put as near as the reconciler knows it) to its first
// Ready (readyAt), both stamped by the reconciler's clock. The decision stamps them; this
// shell reports the boot once the status saying so is stored, so a decision whose write
// fails (a lost lease) reports nothing, and the next leader reports it when it stores it.

// BootObserver hears boots: the metric egress_proxy_boot_seconds (readside/metrics).
type BootObserver interface {
	ObserveBoot(provider, zone, image string, took time.Duration)
}

type bootSeen struct {
	provider, zone, image string
	took                  time.Duration
}

// firstReady is the boot a decision records, if it is the proxy's first Ready.
func firstReady(in Input, st *events.ProxyStatus) *bootSeen {
	if st == nil || st.ReadyAt.IsZero() || st.CreatedAt.IsZero() || in.Spec == nil || (in.Status != nil && !in.Status.ReadyAt.IsZero()) {
		return nil
	}
	return &bootSeen{provider: cmp.Or(st.Provider, in.Spec.Provider), zone: cmp.Or(st.Host, in.Spec.Placement.Zone),
		image: in.Spec.Placement.Image, took: max(st.ReadyAt.Sub(st.CreatedAt), 0)}
}
