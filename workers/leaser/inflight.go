package leaser

import (
	"context"
	"fmt"
	"sync"

	"github.com/egressd/egressd/events"
)

// creating is the slots this replica is creating right now, and their proxies. Requests run
// side by side (run.go, concurrently), and the view counts a grant only once its Create has
// returned: without this, every acquire that arrives meanwhile would read the same best
// candidate and the same free slot, and all but one would lose the Create race and try again,
// a wasted write each. Caps stay exact without it (the Create decides); it only saves the
// writes that would fail.
type creating struct {
	mu      sync.Mutex
	slots   map[string]bool // slot key → being created
	proxies map[string]int  // proxy → slots of it being created
}

func newCreating() *creating {
	return &creating{slots: map[string]bool{}, proxies: map[string]int{}}
}

// take claims slot key of proxy for one Create; false if another request of this replica is
// creating it.
func (c *creating) take(proxy, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slots[key] {
		return false
	}
	c.slots[key] = true
	c.proxies[proxy]++
	return true
}

// drop ends the claim take made, once the view counts its outcome.
func (c *creating) drop(proxy, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.slots, key)
	if c.proxies[proxy]--; c.proxies[proxy] <= 0 {
		delete(c.proxies, proxy)
	}
}

// busy tells whether a slot of proxy is being created: such a proxy is about to count one
// lease more than the view says, so an acquire tries it after the others it read.
func (c *creating) busy(proxy string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proxies[proxy] > 0
}

// spreads says whether an acquire of strategy tries a proxy with a slot being created here
// after the other candidates it read: the strategies whose order puts a proxy that is about
// to gain a lease (or to be the last leased) further back. Packed wants it first, and
// lowest-latency and best-for-target rank by what a lease does not change: for them the
// claim alone keeps concurrent acquires off each other's slot.
func spreads(s events.Strategy) bool {
	switch s {
	case "", events.StrategyBalanced, events.StrategyRoundRobin, events.StrategyRandom:
		return true
	}
	return false
}

// tries is the request IDs an acquire of this replica is serving now. Tries of one request
// that reach one replica together are served one after the other, as they were when the
// replica served one request at a time: the second then finds the first's grant (its record,
// or the view's index) instead of granting too and giving its slot back, and a burst of
// retries cannot take every free slot for a moment and be refused one it was meant to get.
type tries struct {
	mu   sync.Mutex
	busy map[string]chan struct{} // request key → closed when its try here ends
}

func newTries() *tries { return &tries{busy: map[string]chan struct{}{}} }

// lock waits until no other try of key runs here, within ctx, and returns its unlock.
func (t *tries) lock(ctx context.Context, key string) (func(), error) {
	for {
		t.mu.Lock()
		ch, busy := t.busy[key]
		if !busy {
			ch = make(chan struct{})
			t.busy[key] = ch
			t.mu.Unlock()
			return func() {
				t.mu.Lock()
				delete(t.busy, key)
				t.mu.Unlock()
				close(ch)
			}, nil
		}
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for another try of the request on this replica: %w", ctx.Err())
		}
	}
}
