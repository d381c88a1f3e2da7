package kvstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Publishes land in order with their message IDs (a repeat is dropped, a publish without an
// ID never is); one the stream refuses is logged with the record's attributes; Run ends after Close.
func TestPublisher(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kvstore.Ensure(ctx, js, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	p := kvstore.NewPublisher(js, slog.New(slog.NewTextHandler(&logs, nil)), 4)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	for i := range 20 {
		p.Publish(ctx, events.EventSubject(events.KindPhase, "p1"), []byte(`{"v":1}`), "id-"+string(rune('a'+i%10)), "proxy", "p1")
	}
	for range 5 { // no ID: nothing to deduplicate, each is stored
		p.Publish(ctx, events.EventSubject(events.KindPhase, "p2"), []byte(`{"v":1}`), "", "proxy", "p2")
	}
	// No stream takes this subject: the server answers no-responders, and that is logged.
	p.Publish(ctx, "nowhere.at.all", []byte(`{}`), "x", "proxy", "lost-one")
	p.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end after Close")
	}
	s, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 15 {
		t.Errorf("%d events stored, want 15 (ten IDs, each published twice, and five without an ID)", info.State.Msgs)
	}
	if l := logs.String(); !strings.Contains(l, "proxy=lost-one") || strings.Count(l, "level=WARN") != 1 {
		t.Errorf("want one warning about lost-one:\n%s", l)
	}
}

// Once its context has ended, Run gives the acks still due PublishDrainBudget in all, not
// PublishAckBudget each: a stream that stopped acknowledging cannot hold a shutdown.
func TestPublisherDrainIsBounded(t *testing.T) {
	_, nc, js := kvstoretest.Start(t)
	ctx := context.Background()
	// A subscriber that never answers: every publish reaches someone, and no ack ever comes.
	if _, err := nc.Subscribe("slow.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	p := kvstore.NewPublisher(js, slog.New(slog.NewTextHandler(&logs, nil)), 16)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(rctx) }()
	for i := range 8 {
		p.Publish(ctx, "slow.x", []byte("x"), string(rune('a'+i)))
	}
	stop()
	p.Close()
	start := time.Now()
	select {
	case <-done:
	case <-time.After(kvstore.PublishAckBudget * 4):
		t.Fatal("Run did not end")
	}
	// Eight acks at PublishAckBudget each would take 40 s.
	if d := time.Since(start); d >= kvstore.PublishAckBudget {
		t.Errorf("drained in %v, want about %v", d, kvstore.PublishDrainBudget)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 8 {
		t.Errorf("%d warnings for 8 unacknowledged publishes", n)
	}
}
