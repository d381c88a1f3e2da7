package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// MaxLastEntries is the most keys one LastEntries call may match: nats-server answers a
// multi-last read of more with 413 Too Many Results.
const MaxLastEntries = 1024

// LastEntries reads the current entry of every key of kv that matches one of filters (key
// patterns such as "px-1.*"), with one batched direct get. Any current replica of the
// bucket's stream answers it and no consumer is made, so it works while the JetStream meta
// leader is being elected, when a watch that lost its consumer cannot get a new one. A key
// deleted, purged or expired comes as an entry whose Operation says so, at the marker's
// revision; a key with no message left is not there. The filters together may match at
// most MaxLastEntries keys.
func LastEntries(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, filters []string) ([]jetstream.KeyValueEntry, error) {
	if len(filters) == 0 {
		return nil, nil
	}
	prefix := "$KV." + kv.Bucket() + "."
	subjects := make([]string, len(filters))
	for i, f := range filters {
		subjects[i] = prefix + f
	}
	msgs, err := jetstreamext.GetLastMsgsFor(ctx, js, "KV_"+kv.Bucket(), subjects)
	if err != nil {
		return nil, fmt.Errorf("read the last entries of %s: %w", kv.Bucket(), err)
	}
	var out []jetstream.KeyValueEntry
	// The iteration also ends quietly when ctx does, or when nothing answers (a request the
	// server dropped, a permission missing): only the last message's pending count of 0, or
	// the server's "no results", says the read is whole.
	whole := false
	for m, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			// No key matches; after some entries, a message that failed to load (the
			// server folds that into the same 404): not whole.
			whole = len(out) == 0
			break
		}
		if errors.Is(err, jetstreamext.ErrBatchUnsupported) {
			// What the library makes of a status without a message, which from the servers
			// egressd needs (2.11 and later) is the 413 of a read matching too many keys.
			err = errors.Join(ErrTooManyKeys, err)
		}
		if err != nil {
			return nil, fmt.Errorf("read the last entries of %s: %w", kv.Bucket(), err)
		}
		whole = m.Header.Get("Nats-Num-Pending") == "0"
		key, ok := strings.CutPrefix(m.Subject, prefix)
		if !ok {
			continue
		}
		out = append(out, lastEntry{bucket: kv.Bucket(), key: key, value: m.Data, rev: m.Sequence, created: m.Time, op: operationOf(m.Header)})
	}
	if !whole {
		return nil, fmt.Errorf("read the last entries of %s: %d entries, then no more answers: %w", kv.Bucket(), len(out), errors.Join(ErrNoAnswer, ctx.Err()))
	}
	return out, nil
}

// operationOf is what a KV message's headers say it did, as the SDK reads them: a delete or
// purge by a client, or a marker the server left when the key's TTL or the bucket's limits
// removed it.
func operationOf(h nats.Header) jetstream.KeyValueOp {
	switch op, reason := h.Get("KV-Operation"), h.Get(jetstream.MarkerReasonHeader); {
	case op == "DEL":
		return jetstream.KeyValueDelete
	case op == "PURGE":
		return jetstream.KeyValuePurge
	case op != "":
		return jetstream.KeyValuePut
	case reason == "MaxAge" || reason == "Purge":
		return jetstream.KeyValuePurge
	case reason == "Remove":
		return jetstream.KeyValueDelete
	}
	return jetstream.KeyValuePut
}

// lastEntry is a jetstream.KeyValueEntry read by LastEntries.
type lastEntry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e lastEntry) Bucket() string                  { return e.bucket }
func (e lastEntry) Key() string                     { return e.key }
func (e lastEntry) Value() []byte                   { return e.value }
func (e lastEntry) Revision() uint64                { return e.rev }
func (e lastEntry) Created() time.Time              { return e.created }
func (e lastEntry) Delta() uint64                   { return 0 }
func (e lastEntry) Operation() jetstream.KeyValueOp { return e.op }

// LastEntry reads the current entry of one key of kv, with one direct get on s, the handle of
// kv's stream (from js.Stream of "KV_"+bucket; keep it, since getting one asks the server for
// the stream's info). It reads as LastEntries does (a deleted, purged or expired key comes
// with its marker's operation and revision) without the batch's subscription, whose buffer
// costs more than the read for one key; ErrNotFound when the key has no message left.
func LastEntry(ctx context.Context, s jetstream.Stream, kv jetstream.KeyValue, key string) (jetstream.KeyValueEntry, error) {
	m, err := s.GetLastMsgForSubject(ctx, "$KV."+kv.Bucket()+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("read the last entry of %s %s: %w", kv.Bucket(), key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read the last entry of %s %s: %w", kv.Bucket(), key, err)
	}
	return lastEntry{bucket: kv.Bucket(), key: key, value: m.Data, rev: m.Sequence, created: m.Time, op: operationOf(m.Header)}, nil
}
