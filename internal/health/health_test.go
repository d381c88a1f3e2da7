package health

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The verdicts over a scripted history of round trips, on a clock the test moves.
func TestVerdicts(t *testing.T) {
	down := errors.New("nats: timeout")
	for _, c := range []struct {
		name      string
		steps     []step
		ready     bool
		wantAlive string // "" alive, else a part of the error
		wantReady string
	}{
		{"fresh, not started", nil, false, "", "starting"},
		{"fresh, started, no try yet", nil, true, "", "no answer yet"},
		{"answering", []step{{5 * time.Second, nil}}, true, "", ""},
		{"one failure within the bound", []step{{5 * time.Second, nil}, {5 * time.Second, down}}, true, "", "does not answer: nats: timeout"},
		{"failing past the bound", []step{{5 * time.Second, nil}, {10 * time.Second, down}, {11 * time.Second, down}}, true,
			"not answered for 21s (bound 20s): nats: timeout", "nats: timeout"},
		{"never answered past the bound", []step{{21 * time.Second, down}}, true, "not answered for 21s", "nats: timeout"},
		{"back again", []step{{30 * time.Second, down}, {time.Second, nil}}, true, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			h := New(nil, 20*time.Second)
			h.now, h.since = func() time.Time { return now }, now
			for _, s := range c.steps {
				now = now.Add(s.after)
				h.record(s.err)
			}
			if c.ready {
				h.SetReady()
			}
			check(t, "alive", h.Alive(), c.wantAlive)
			check(t, "ready", h.Ready(), c.wantReady)
		})
	}
}

type step struct {
	after time.Duration
	err   error
}

func check(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v, want nil", what, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: %v, want an error with %q", what, err, want)
	}
}

// Run tries at once, then at the interval, each try within its budget, and stops with ctx.
func TestRunProbesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tries := make(chan time.Duration, 10)
	h := New(func(pctx context.Context) error {
		dl, _ := pctx.Deadline()
		tries <- time.Until(dl)
		return nil
	}, 400*time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	for i := range 2 {
		if budget := <-tries; budget <= 0 || budget > 100*time.Millisecond {
			t.Fatalf("try %d: budget %s, want within the interval", i, budget)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.SetReady()
	if err := h.Ready(); err != nil {
		t.Fatal(err)
	}
}
