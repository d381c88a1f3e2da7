package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A role started by a newer egressd on an installation an older `egressd setup` declared
// may find a bucket it needs missing: a bucket the newer version added. Open makes such a
// bucket itself, with the configuration Ensure gives it (buckets(), the one home of each
// bucket's config) and the replica count of the installation, so a rolling upgrade needs no
// setup step; where the role's NATS user may not create it, Open fails at once, naming the
// bucket, the subject its user lacks and the command that declares it.

// ErrMissing is a bucket a role needs that does not exist and that its NATS user may not
// create (errors.Is); the error's text names the bucket and `egressd setup`.
var ErrMissing = errors.New("missing")

// MissingError is ErrMissing's detail.
type MissingError struct {
	Bucket  string // the bucket, as the SDK names it
	Subject string // the JetStream API subject the user was denied
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("bucket %s is missing and this NATS user may not create it (denied %q; creating it takes %q and %q): "+
		"run `egressd setup` as the admin user to declare it, or allow those subjects to this role's user (deploy/nats/nats-server.conf)",
		e.Bucket, e.Subject, "$JS.API.INFO", "$JS.API.STREAM.CREATE.KV_"+e.Bucket)
}

func (e *MissingError) Is(target error) bool { return target == ErrMissing }

// deniedPoll is how often Open looks at the connection's last error for a permission
// violation while a JetStream request waits: a denied request is never answered.
const deniedPoll = 50 * time.Millisecond

// Open binds the buckets of an installation for a role that names what it uses: a named
// bucket that is missing is created (when the installation exists, its egress_locks bound)
// with Ensure's configuration and the installation's replica count; a bucket not named is
// bound if present (and the user may look at it) and left nil if not. ErrBucketNotFound (wrapped) when egress_locks itself
// is missing: the installation was never set up, and the caller may wait for setup.
// Lease shards are bound as OpenLeaseShards does: every installation has them.
func Open(ctx context.Context, js jetstream.JetStream, names []string) (*Store, error) {
	s := &Store{JS: js}
	locks, err := bindGuarded(ctx, js, events.BucketLocks)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s (has `egressd setup` run?): %w", events.BucketLocks, err)
	}
	// Asked of the server only when a bucket is to be made, which most starts never do.
	replicas := sync.OnceValue(func() int {
		if st, err := locks.Status(ctx); err == nil {
			if info, ok := st.(*jetstream.KeyValueBucketStatus); ok {
				return max(info.StreamInfo().Config.Replicas, 1)
			}
		}
		return 1
	})
	for _, b := range s.buckets() {
		if b.cfg.Bucket == events.BucketLocks {
			*b.dst = locks
			continue
		}
		named := slices.Contains(names, b.cfg.Bucket)
		kv, err := bindGuarded(ctx, js, b.cfg.Bucket)
		var denied *deniedError
		switch {
		case err == nil:
			*b.dst = kv
		case errors.As(err, &denied) && !named:
			// Not this role's: a user that may not even look at it does without it.
		case !errors.Is(err, jetstream.ErrBucketNotFound):
			return nil, fmt.Errorf("bind bucket %s: %w", b.cfg.Bucket, err)
		case named:
			b.cfg.Storage, b.cfg.Replicas = jetstream.FileStorage, replicas()
			if *b.dst, err = createGuarded(ctx, js, b.cfg); err != nil {
				return nil, err
			}
			s.Created = append(s.Created, b.cfg.Bucket)
		}
	}
	if s.Leases, err = OpenLeaseShards(ctx, js); err != nil {
		return nil, err
	}
	return s, nil
}

// bindGuarded binds a bucket, failing at once with the denied subject if the user may not.
func bindGuarded(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	return guarded(ctx, js.Conn(), []string{"$JS.API.STREAM.INFO.KV_" + bucket}, func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, bucket) })
}

// createGuarded creates a bucket (or binds it if another process created it meanwhile).
func createGuarded(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	// The SDK asks for the account's JetStream info first (whether the server knows
	// per-key TTLs), then creates the stream.
	kv, err := guarded(ctx, js.Conn(), []string{"$JS.API.INFO", "$JS.API.STREAM.CREATE.KV_" + cfg.Bucket}, func(ctx context.Context) (jetstream.KeyValue, error) {
		return declare(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateKeyValue(ctx, cfg) })
	})
	var denied *deniedError
	switch {
	case errors.As(err, &denied):
		return nil, &MissingError{Bucket: cfg.Bucket, Subject: denied.subject}
	case errors.Is(err, jetstream.ErrBucketExists):
		// Made by another role meanwhile, with a config that differs only in what a
		// server fills in: bind what is there.
		return bindGuarded(ctx, js, cfg.Bucket)
	case err != nil:
		return nil, fmt.Errorf("create bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// deniedError is a JetStream request the server refused for the connection's user.
type deniedError struct{ subject string }

func (e *deniedError) Error() string {
	return fmt.Sprintf("permission denied: this NATS user may not publish to %q", e.subject)
}

// guarded runs call, and ends it early with a deniedError when the connection's last error
// is a permission violation for one of subjects: the server drops a denied request unanswered and
// tells the client only asynchronously, so without this the call would wait out its budget.
func guarded[T any](ctx context.Context, nc *nats.Conn, subjects []string, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call(ctx)
		done <- result{v, err}
	}()
	tick := time.NewTicker(deniedPoll)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			if cause := context.Cause(ctx); r.err != nil && errors.As(cause, new(*deniedError)) {
				return r.v, cause
			}
			return r.v, r.err
		case <-tick.C:
			if subject := violated(nc, subjects); subject != "" {
				cancel(&deniedError{subject: subject})
			}
		}
	}
}

// violated is the subject of subjects that the connection's last error, a permission
// violation, names; "" for none.
func violated(nc *nats.Conn, subjects []string) string {
	err := nc.LastError()
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return ""
	}
	for _, s := range subjects {
		if strings.Contains(strings.ToLower(err.Error()), strings.ToLower(`publish to "`+s+`"`)) {
			return s
		}
	}
	return ""
}
