package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A JetStream request the server denies is never answered: the server sends the client an
// asynchronous "Permissions Violation for Publish to <subject>" and drops the request, so the
// read behind it waits out its whole budget (15 s for `egressd status` as the viewer of
// deploy/nats, which may not read specs). denials turns those violations into errors for the
// reads waiting on them, at once.

// deniedError is a read the server refused for the connection's user.
type deniedError struct {
	Bucket  string // the bucket the denied subject belongs to
	Op      string // "publish" or "subscribe"
	Subject string
	User    string // from EGRESSD_NATS_USER; "" when none is set
}

func (e *deniedError) Error() string {
	who := "this NATS user"
	if e.User != "" {
		who = fmt.Sprintf("the NATS user %q", e.User)
	}
	return fmt.Sprintf("permission denied: %s may not %s to %q", who, e.Op, e.Subject)
}

// denials watches a connection's permission violations on behalf of the reads registered
// with guard.
type denials struct {
	mu      sync.Mutex
	waiters map[*denialWaiter]struct{}
}

type denialWaiter struct {
	bucket string
	cancel context.CancelCauseFunc
}

func newDenials() *denials { return &denials{waiters: map[*denialWaiter]struct{}{}} }

// option installs the handler on a connection (it replaces nats.go's default, which prints
// the raw violation to stderr).
func (d *denials) option() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { d.handle(err) })
}

var violationRe = regexp.MustCompile(`(?i)violation for (publish|subscription) to "([^"]+)"`)

func (d *denials) handle(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	m := violationRe.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	op := "publish"
	if strings.EqualFold(m[1], "subscription") {
		op = "subscribe"
	}
	bucket := bucketOf(m[2])
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.waiters {
		if w.bucket == bucket {
			w.cancel(&deniedError{Bucket: bucket, Op: op, Subject: m[2], User: os.Getenv(envUser)})
		}
	}
}

// bucketOf is the KV bucket a JetStream or KV subject concerns: the stream token KV_<bucket>
// ($JS.API.CONSUMER.CREATE.KV_proxies.…, $JS.API.DIRECT.GET.KV_proxies.…, $JS.FC.KV_proxies.…)
// or $KV.<bucket>.<key>; "" for any other subject.
func bucketOf(subject string) string {
	tokens := strings.Split(subject, ".")
	if len(tokens) > 1 && tokens[0] == "$KV" {
		return tokens[1]
	}
	for _, t := range tokens {
		if b, ok := strings.CutPrefix(t, "KV_"); ok {
			return b
		}
	}
	return ""
}

// guard returns ctx, ended with a *deniedError as its cause as soon as the server denies a
// request about bucket, and the function that ends and forgets it.
func (d *denials) guard(ctx context.Context, bucket string) (context.Context, func()) {
	gctx, cancel := context.WithCancelCause(ctx)
	w := &denialWaiter{bucket: bucket, cancel: cancel}
	d.mu.Lock()
	d.waiters[w] = struct{}{}
	d.mu.Unlock()
	return gctx, func() {
		d.mu.Lock()
		delete(d.waiters, w)
		d.mu.Unlock()
		cancel(nil)
	}
}

// denied is the denial that ended ctx, or err as it is.
func denied(ctx context.Context, err error) error {
	var de *deniedError
	if err != nil && errors.As(context.Cause(ctx), &de) {
		return de
	}
	return err
}

// guardedKV is a bucket whose reads (kvstore.Latest: a watch, then the bucket's status) end
// with a *deniedError as soon as the server denies them.
type guardedKV struct {
	jetstream.KeyValue
	d *denials
}

func (g guardedKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	gctx, release := g.d.guard(ctx, g.Bucket())
	w, err := g.KeyValue.WatchAll(gctx, opts...)
	if err != nil {
		release()
		return nil, denied(gctx, err)
	}
	return releasingWatcher{KeyWatcher: w, release: release}, nil
}

func (g guardedKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	gctx, release := g.d.guard(ctx, g.Bucket())
	defer release()
	st, err := g.KeyValue.Status(gctx)
	return st, denied(gctx, err)
}

// releasingWatcher forgets its guard when stopped; until then a denial (of flow control, say)
// ends the watch.
type releasingWatcher struct {
	jetstream.KeyWatcher
	release func()
}

func (w releasingWatcher) Stop() error {
	err := w.KeyWatcher.Stop()
	w.release()
	return err
}

// reader is a connection of a read-only command (`egressd status`) whose bucket reads fail
// fast when the server denies them.
type reader struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	denied *denials
}

func dialReader(url, name string) (*reader, error) {
	d := newDenials()
	nc, err := dial(url, name, defaultDialTimeout, d.option())
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &reader{nc: nc, js: js, denied: d}, nil
}

func (r *reader) Close() { r.nc.Close() }

// open opens a bucket for reading; one that does not exist yet is nil, which the read model
// reads as empty.
func (r *reader) open(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	gctx, release := r.denied.guard(ctx, bucket)
	defer release()
	kv, err := r.js.KeyValue(gctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err := denied(gctx, err); err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bucket, err)
	}
	return guardedKV{KeyValue: kv, d: r.denied}, nil
}
