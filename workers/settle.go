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

// Settle maps the class of an op's error (none for success, a provider's class, or
// events.ClassStale) and the attempt number to how the message is settled. It is the only
// place this mapping lives. attempt counts only deliveries that ran the op (see the
// provisioner's attempts), not the server's delivery count.
func Settle(class events.ErrorClass, attempt, maxAttempts int) Settlement {
	switch class {
	case events.ClassNone, events.ClassNotFound, events.ClassQuota, events.ClassStale:
		return Settlement{Action: Ack, Final: true}
	case events.ClassPermanent:
		return Settlement{Action: Term, Final: true}
	}
	if attempt >= maxAttempts {
		return Settlement{Action: Term, Final: true}
	}
	return Settlement{Action: NakDelay, Delay: Backoff(attempt, time.Second, 30*time.Second)}
}

// ClassOf is the wire class of a provider's error: none for nil, and for anything
// unclassified Transient, as providers.ClassOf reads it. It is the one place a providers
// class becomes an events.ErrorClass (providers and events import only the standard library,
// so neither can hold it).
func ClassOf(err error) events.ErrorClass {
	switch providers.ClassOf(err) {
	case nil:
		return events.ClassNone
	case providers.ErrNotFound:
		return events.ClassNotFound
	case providers.ErrQuota:
		return events.ClassQuota
	case providers.ErrPermanent:
		return events.ClassPermanent
	default:
		return events.ClassTransient
	}
}

// Backoff is base·2^(n-1), capped at limit; n < 1 counts as 1.
func Backoff(n int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
