package kvstoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Record is one key's value in a bucket, for PutMany.
type Record struct {
	Bucket, Key string
	Value       []byte
}

// PutMany writes the records with async publishes and waits for every ack, failing the test
// on the first error: seeding a fleet of thousands one synchronous put at a time would take
// much of a benchmark's budget.
func PutMany(t testing.TB, js jetstream.JetStream, records iter.Seq[Record]) {
	t.Helper()
	var futs []jetstream.PubAckFuture
	timeout := time.After(time.Minute)
	for r := range records {
		f, err := js.PublishAsync("$KV."+r.Bucket+"."+r.Key, r.Value)
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			// The server is behind (a busy machine; the process under test shares it): let
			// the outstanding puts be acknowledged, then go on.
			select {
			case <-js.PublishAsyncComplete():
			case <-timeout:
				t.Fatalf("seeding: %d puts not acknowledged within a minute", js.PublishAsyncPending())
			}
			f, err = js.PublishAsync("$KV."+r.Bucket+"."+r.Key, r.Value)
		}
		if err != nil {
			t.Fatalf("put %s/%s: %v", r.Bucket, r.Key, err)
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("put %s: %v", f.Msg().Subject, err)
		case <-timeout:
			t.Fatalf("seeding %d records: not acknowledged within a minute", len(futs))
		}
	}
}

// PublishEvent publishes ev on its subject as a role would, with an ID and a time when it has
// none, failing the test if the stream does not take it.
func PublishEvent(t testing.TB, js jetstream.JetStream, ev events.Event) {
	t.Helper()
	if ev.ID == "" {
		ev.ID = fmt.Sprintf("%s:%s:%d", ev.Kind, ev.Proxy, time.Now().UnixNano())
	}
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), events.EventSubject(ev.Kind, ev.Proxy), b, jetstream.WithMsgID(ev.ID),
		// A stream made a moment ago on a cluster may not have its interest on every server yet.
		jetstream.WithRetryAttempts(20)); err != nil {
		t.Fatalf("publish %s: %v", ev.ID, err)
	}
}

// SeedReadyFleet writes the fleet of the lease benchmarks: n managed proxies px-00000… with
// maxLeases 3 and an attribute geo of eight values, each with a Ready status, as PutMany does.
func SeedReadyFleet(b testing.TB, js jetstream.JetStream, n int) {
	b.Helper()
	PutMany(b, js, func(yield func(Record) bool) {
		for i := range n {
			name := fmt.Sprintf("px-%05d", i)
			spec := []byte(`{"provider":"local","maxLeases":3,"attributes":{"geo":"g` + strconv.Itoa(i%8) + `"}}`)
			st, err := json.Marshal(events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "managed", Provider: "local",
				Host: "local", IP: fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250), Port: 3128})
			if err != nil {
				b.Fatal(err)
			}
			if !yield(Record{Bucket: events.BucketProxies, Key: name, Value: spec}) ||
				!yield(Record{Bucket: events.BucketStatus, Key: name, Value: st}) {
				return
			}
		}
	})
}
