package reconciler

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// TestTallyLimits: the counts Decide gets, under a provider's and the installation's limits.
func TestTallyLimits(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	has := func(provider, host string) *events.ProxyStatus {
		return &events.ProxyStatus{Provider: provider, Host: host, InstanceID: "i"}
	}
	waits := func(provider string, declared time.Time) *events.ProxyStatus {
		return &events.ProxyStatus{Provider: provider, Reason: events.ReasonLimitReached, CreatedAt: declared}
	}
	caps := map[string]*instanceCap{"full": {max: 1}, "roomy": {max: 10, perTarget: 2}}
	tl := newTally()
	tl.set("f1", has("full", "h1"))
	tl.set("r1", has("roomy", "h1"))
	tl.set("r2", has("roomy", "h1"))
	tl.set("wf", waits("full", at(0)))  // held by its own provider: holds nobody else back
	tl.set("wr", waits("roomy", at(1))) // may take the installation's room
	lim := tl.limit(caps, 4, "roomy", "new", at(2))
	if lim.Count != 2 || lim.TargetCount["h1"] != 2 || lim.GlobalCount != 3 || lim.GlobalAhead != 1 || lim.Ahead != 1 {
		t.Errorf("limit for a new roomy proxy: %+v", lim)
	}
	// A proxy's own instance is not in its way.
	if lim := tl.limit(caps, 4, "roomy", "r1", at(-1)); lim.Count != 1 || lim.TargetCount["h1"] != 1 || lim.GlobalCount != 2 {
		t.Errorf("limit for r1 itself: %+v", lim)
	}
	if lim := tl.limit(nil, 0, "roomy", "x", at(0)); lim != nil {
		t.Errorf("no limits: %+v", lim)
	}
	// An instance gone anywhere wakes every provider's waiters under an installation's limit,
	// oldest first; without one only its own provider's.
	tl.set("f1", nil)
	if got := tl.takeFreed(4); !slices.Equal(got, []string{"wf", "wr"}) {
		t.Errorf("freed with an installation's limit: %v", got)
	}
	tl.set("r2", nil)
	if got := tl.takeFreed(0); !slices.Equal(got, []string{"wr"}) {
		t.Errorf("freed without: %v", got)
	}
}

// TestDecideInstallationLimit: the installation's limit holds a create back like a provider's,
// counting those waiting ahead.
func TestDecideInstallationLimit(t *testing.T) {
	in := input(t, spec(t, base), nil, t0)
	in.Limit = &InstanceLimit{GlobalMax: 5, GlobalCount: 4, GlobalAhead: 1, TargetCount: map[string]int{}}
	d := Decide(DefaultPolicy(), in)
	if d.Status.Reason != events.ReasonLimitReached || len(d.Ops) != 0 {
		t.Fatalf("reason %s ops %v", d.Status.Reason, d.Ops)
	}
	if want := "the installation has 4 of its 5 instances"; !strings.Contains(d.Status.Message, want) || !strings.Contains(d.Status.Message, "1 declared before") {
		t.Errorf("message %q", d.Status.Message)
	}
	in.Limit.GlobalAhead = 0
	if d := Decide(DefaultPolicy(), in); len(d.Ops) != 1 || d.Ops[0].Kind != events.OpCreate {
		t.Errorf("with room: ops %v reason %s", d.Ops, d.Status.Reason)
	}
}
