// Package health says whether a process can do its job, for /healthz and /readyz: a
// process whose NATS connection is up can still be useless (a JetStream that stopped
// answering, a store wedged in recovery), and an orchestrator only restarts what fails its
// liveness check. The check is a round trip through JetStream at an interval; the process
// is alive while one succeeded within a stated bound, and ready once its start is over and
// the latest round trip succeeded.
package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultBound is how long JetStream may stay unanswered before a process is not alive:
// longer than a JetStream leader election (a few seconds) and a NATS reconnect, so a node
// lost from a cluster does not get its neighbours restarted.
const DefaultBound = 20 * time.Second

// Checker runs the probe and keeps its verdicts.
type Checker struct {
	probe    func(context.Context) error
	bound    time.Duration
	interval time.Duration // bound/4: four tries before the bound passes
	budget   time.Duration // each try's deadline
	now      func() time.Time

	mu      sync.Mutex
	since   time.Time // when the last success came, or the checker was made
	lastErr error     // the latest try's error; nil after a success
	tried   bool
	ready   bool
}

// New checks with probe, alive while a success is no older than bound (DefaultBound if 0).
func New(probe func(context.Context) error, bound time.Duration) *Checker {
	if bound <= 0 {
		bound = DefaultBound
	}
	interval := bound / 4
	return &Checker{probe: probe, bound: bound, interval: interval, budget: min(interval, 5*time.Second),
		now: time.Now, since: time.Now()}
}

// Run probes at the interval until ctx ends.
func (c *Checker) Run(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.try(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *Checker) try(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, c.budget)
	err := c.probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return // the process is stopping: no verdict
	}
	c.record(err)
}

func (c *Checker) record(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tried, c.lastErr = true, err
	if err == nil {
		c.since = c.now()
	}
}

// SetReady says the process's start is over: every role it runs is running.
func (c *Checker) SetReady() {
	c.mu.Lock()
	c.ready = true
	c.mu.Unlock()
}

// Alive is nil unless JetStream has not answered for longer than the bound.
func (c *Checker) Alive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if quiet := c.now().Sub(c.since); quiet > c.bound {
		return fmt.Errorf("JetStream has not answered for %s (bound %s): %w", quiet.Round(time.Second), c.bound, c.cause())
	}
	return nil
}

// Ready is nil once the start is over and the latest round trip succeeded.
func (c *Checker) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.ready:
		return errors.New("starting")
	case !c.tried || c.lastErr != nil:
		return fmt.Errorf("JetStream does not answer: %w", c.cause())
	}
	return nil
}

func (c *Checker) cause() error {
	if c.lastErr == nil {
		return errors.New("no answer yet")
	}
	return c.lastErr
}
