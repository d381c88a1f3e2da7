package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// AsyncPublisher is the part of a JetStream context WriteAsync needs.
type AsyncPublisher interface {
	PublishAsync(subject string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
}

// Pending is a CAS write in flight: published, its ack not read yet.
type Pending struct {
	f     jetstream.PubAckFuture
	kv    Writer
	key   string
	value []byte
	rev   uint64
}

// WriteAsync starts the write WriteJSON would do, without waiting for its ack, so a writer
// with many keys to write pays one round trip for all of them instead of one each: it
// publishes value to the key's subject expecting rev as the key's last revision (rev 0: no
// revision at all), as the SDK's Update and Create do inside. Wait reads the outcome.
func WriteAsync(js AsyncPublisher, kv jetstream.KeyValue, key string, value []byte, rev uint64) (*Pending, error) {
	f, err := js.PublishAsync("$KV."+kv.Bucket()+"."+key, value, jetstream.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", key, mapErr(err))
	}
	return &Pending{f: f, kv: kv, key: key, value: value, rev: rev}, nil
}

// Wait returns the key's new revision, or ErrConflict when rev was not its latest. A create
// (rev 0) that loses because the key's latest entry is a delete marker is done again through
// the SDK's Create, which writes over a marker, so WriteAsync means exactly what WriteJSON
// does. When ctx ends first the write's outcome is unknown: a later CAS at rev tells.
func (p *Pending) Wait(ctx context.Context) (uint64, error) {
	ack, err := Await(ctx, p.f)
	if err == nil {
		return ack.Sequence, nil
	}
	if p.rev == 0 && errors.Is(err, ErrConflict) {
		rev, err := p.kv.Create(ctx, p.key, p.value)
		return rev, mapErr(err)
	}
	return 0, fmt.Errorf("write %s: %w", p.key, err)
}

// Await waits for the ack of an async publish until ctx ends; the server's refusals come
// back mapped as by every helper here (a lost CAS is ErrConflict).
func Await(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, mapErr(err)
	case <-ctx.Done():
		return nil, fmt.Errorf("no ack for %s: %w", f.Msg().Subject, ctx.Err())
	}
}
