package workers

import (
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
)

// Action is how a provisioner settles an op message.
type Action int

// Settlement actions.
const (
	Ack      Action = iota // done: the result is final
	NakDelay               // retry the same op after a delay
	Term                   // never redeliver: permanent, or out of attempts
)

func (a Action) String() string {
	return [...]string{"ack", "nak", "term"}[a]
}

// Settlement is the decision for one delivery of an op.
type Settlement struct {
	Action Action
	Delay  time.Duration
	Final  bool // the reconciler should treat the op as finished
}

// Settle maps the class of an op's error (nil for success, or a providers class, or the
// events.ClassStale marker) and the delivery count to how the message is settled. It is the
// only place this mapping lives.
func Settle(class string, delivered, maxDeliver int) Settlement {
	switch class {
	case "", "NotFound", "Quota", events.ClassStale:
		return Settlement{Action: Ack, Final: true}
	case "Permanent":
		return Settlement{Action: Term, Final: true}
	}
	if delivered >= maxDeliver {
		return Settlement{Action: Term, Final: true}
	}
	return Settlement{Action: NakDelay, Delay: Backoff(delivered, time.Second, 30*time.Second)}
}

// ClassOf is providers.ClassName, re-exported so roles need one import for settling.
func ClassOf(err error) string { return providers.ClassName(err) }

// Backoff is base·2^(n-1), capped at limit; n < 1 counts as 1.
func Backoff(n int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
