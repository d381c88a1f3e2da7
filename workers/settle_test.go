package workers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
)

func TestSettle(t *testing.T) {
	cases := []struct {
		class     events.ErrorClass
		delivered int
		want      Settlement
	}{
		{events.ClassNone, 1, Settlement{Action: Ack, Final: true}},
		{events.ClassNotFound, 1, Settlement{Action: Ack, Final: true}},
		{events.ClassQuota, 3, Settlement{Action: Ack, Final: true}},
		{events.ClassStale, 1, Settlement{Action: Ack, Final: true}},
		{events.ClassPermanent, 1, Settlement{Action: Term, Final: true}},
		{events.ClassTransient, 1, Settlement{Action: NakDelay, Delay: time.Second}},
		{events.ClassTransient, 3, Settlement{Action: NakDelay, Delay: 4 * time.Second}},
		{events.ClassTransient, 5, Settlement{Action: NakDelay, Delay: 16 * time.Second}},
		{events.ClassTransient, 6, Settlement{Action: Term, Final: true}},
		{"SomethingNew", 1, Settlement{Action: NakDelay, Delay: time.Second}},
	}
	for _, c := range cases {
		if got := Settle(c.class, c.delivered, 6); got != c.want {
			t.Errorf("Settle(%q, %d) = %+v, want %+v", c.class, c.delivered, got, c.want)
		}
	}
}

func TestClassOf(t *testing.T) {
	cases := []struct {
		err  error
		want events.ErrorClass
	}{
		{nil, events.ClassNone},
		{providers.Errorf(providers.ErrNotFound, "get", "p", "id", "gone"), events.ClassNotFound},
		{providers.Errorf(providers.ErrQuota, "create", "p", "", "full"), events.ClassQuota},
		{providers.Errorf(providers.ErrPermanent, "get", "p", "id", "bad"), events.ClassPermanent},
		{providers.Errorf(providers.ErrTransient, "get", "p", "id", "busy"), events.ClassTransient},
		{errors.New("unclassified"), events.ClassTransient},
		{context.Canceled, events.ClassTransient},
		{fmt.Errorf("outer: %w", providers.Errorf(providers.ErrQuota, "create", "p", "", "pool full")), events.ClassQuota},
	}
	for _, c := range cases {
		if got := ClassOf(c.err); got != c.want {
			t.Errorf("ClassOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 6: 30 * time.Second, 100: 30 * time.Second} {
		if got := Backoff(n, time.Second, 30*time.Second); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}
