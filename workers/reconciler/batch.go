package reconciler

import (
	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// maxBatch bounds the proxies one pass of the leader decides for and writes at once, and so
// the status writes and ops it has in flight (the SDK allows 4,000 async publishes pending
// per connection before it stalls).
const maxBatch = 256

// A batch is the proxies one pass decides for: each named once, at most one op result each.
// Watch entries are applied to the leader's view as they are taken, so a proxy named twice
// is simply decided once from its latest state (the loop is level-triggered).
type batch struct {
	names   []string
	index   map[string]int
	results []*events.OpResult // by position in names; nil when none
	msgs    []jetstream.Msg    // the result messages to ack once the status is stored
}

func newBatch() *batch { return &batch{index: map[string]int{}} }

func (b *batch) full() bool { return len(b.names) >= maxBatch }

// add names a proxy (again); it reports false when the batch is full and it is not in it.
func (b *batch) add(name string) bool {
	if _, ok := b.index[name]; ok {
		return true
	}
	if b.full() {
		return false
	}
	b.index[name] = len(b.names)
	b.names = append(b.names, name)
	b.results = append(b.results, nil)
	b.msgs = append(b.msgs, nil)
	return true
}

// addResult adds an op result to fold; false when the proxy already has one in this batch
// (results of one proxy are folded one pass after another, in order) or the batch is full.
func (b *batch) addResult(name string, r *events.OpResult, m jetstream.Msg) bool {
	if i, ok := b.index[name]; ok && b.results[i] != nil {
		return false
	}
	if !b.add(name) {
		return false
	}
	i := b.index[name]
	b.results[i], b.msgs[i] = r, m
	return true
}
