package kvstoretest

import (
	"iter"
	"testing"
	"time"

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
	for r := range records {
		f, err := js.PublishAsync("$KV."+r.Bucket+"."+r.Key, r.Value)
		if err != nil {
			t.Fatalf("put %s/%s: %v", r.Bucket, r.Key, err)
		}
		futs = append(futs, f)
	}
	timeout := time.After(time.Minute)
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
