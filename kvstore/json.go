package kvstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Getter is the part of a bucket GetJSON needs.
type Getter interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
}

// GetJSON reads key and decodes it into v, returning the revision. ErrNotFound when absent.
func GetJSON(ctx context.Context, kv Getter, key string, v any) (uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return 0, mapErr(err)
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return 0, fmt.Errorf("decode %s: %w", key, err)
	}
	return e.Revision(), nil
}

// Get reads the raw value and revision of key. ErrNotFound when absent.
func Get(ctx context.Context, kv Getter, key string) ([]byte, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, 0, mapErr(err)
	}
	return e.Value(), e.Revision(), nil
}

// Writer is the part of a bucket the CAS helpers need.
type Writer interface {
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
}

// CreateJSON writes key only if absent. ErrConflict when present.
func CreateJSON(ctx context.Context, kv Writer, key string, v any) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Create(ctx, key, b)
	return rev, mapErr(err)
}

// UpdateJSON writes key only if its revision is still rev. ErrConflict otherwise.
func UpdateJSON(ctx context.Context, kv Writer, key string, v any, rev uint64) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	nrev, err := kv.Update(ctx, key, b, rev)
	return nrev, mapErr(err)
}

// WriteJSON creates key when rev is 0 and updates it at rev otherwise.
func WriteJSON(ctx context.Context, kv Writer, key string, v any, rev uint64) (uint64, error) {
	if rev == 0 {
		return CreateJSON(ctx, kv, key, v)
	}
	return UpdateJSON(ctx, kv, key, v, rev)
}

// PutJSON writes key unconditionally.
func PutJSON(ctx context.Context, kv Writer, key string, v any) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Put(ctx, key, b)
	return rev, mapErr(err)
}

// DeleteAt deletes key only if its revision is still rev (any revision when rev is 0).
func DeleteAt(ctx context.Context, kv Writer, key string, rev uint64) error {
	var opts []jetstream.KVDeleteOpt
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	return mapErr(kv.Delete(ctx, key, opts...))
}

// RevisionGetter is the part of a bucket GetAt needs.
type RevisionGetter interface {
	GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error)
}

// GetAt reads the value key had at revision (a bucket with history keeps a few).
// ErrNotFound when that revision is gone or was a delete.
func GetAt(ctx context.Context, kv RevisionGetter, key string, revision uint64) ([]byte, error) {
	e, err := kv.GetRevision(ctx, key, revision)
	if err != nil {
		return nil, mapErr(err)
	}
	if e.Operation() != jetstream.KeyValuePut {
		return nil, ErrNotFound
	}
	return e.Value(), nil
}
