package kvstore

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PutTTL writes key with a per-key TTL. KeyValue.Put and Update take no TTL (and Update drops
// one), so this publishes to the key's subject as the SDK does inside Create. With rev > 0 the
// write only succeeds if rev is still the key's latest revision (ErrConflict otherwise). The
// bucket needs History 1 and limit markers.
func PutTTL(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	opts := []jetstream.PublishOpt{jetstream.WithMsgTTL(ttl)}
	if rev > 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(rev))
	}
	ack, err := js.Publish(ctx, "$KV."+kv.Bucket()+"."+key, value, opts...)
	if err != nil {
		return 0, mapErr(err)
	}
	return ack.Sequence, nil
}

// CreateTTL writes key with a per-key TTL only if it is absent, deleted or expired
// (ErrConflict otherwise): the first write of a TTL record that two writers may race on. The
// bucket needs History 1 and limit markers.
func CreateTTL(ctx context.Context, kv Writer, key string, value []byte, ttl time.Duration) (uint64, error) {
	rev, err := kv.Create(ctx, key, value, jetstream.KeyTTL(ttl))
	return rev, mapErr(err)
}

// WriteTTL creates key with a per-key TTL when rev is 0 (CreateTTL) and writes it at rev
// otherwise (PutTTL): the TTL twin of WriteJSON, for a record read before it is rewritten.
func WriteTTL(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	if rev == 0 {
		return CreateTTL(ctx, kv, key, value, ttl)
	}
	return PutTTL(ctx, js, kv, key, value, rev, ttl)
}

// DeleteNoted deletes key at revision rev (ErrConflict if it moved on) with a delete marker
// that carries note as its value: a KV delete is a message with the header KV-Operation: DEL
// (ADR-8), which reads as absent, and every watcher receives the note with the delete entry.
func DeleteNoted(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, rev uint64, note []byte) error {
	m := nats.NewMsg("$KV." + kv.Bucket() + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	m.Data = note
	_, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	return mapErr(err)
}
