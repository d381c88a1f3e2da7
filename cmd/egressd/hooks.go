package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/egressd/egressd/cmd/egressd/internal/config"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// providerHooks are the NATS-backed services providers are handed through their own hook
// types: a cross-process lock and progress events. The store is set once NATS is connected;
// providers are built (and their config checked) before that, and call hooks only later.
type providerHooks struct {
	mu     sync.Mutex
	store  *kvstore.Store
	holder string
	log    *slog.Logger
	ttl    time.Duration // hookLockTTL unless a test sets it
}

func (h *providerHooks) connect(store *kvstore.Store, holder string, log *slog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.store, h.holder, h.log = store, holder, log
}

func (h *providerHooks) get() (*kvstore.Store, string, *slog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.store, h.holder, h.log
}

// forProviders is the hooks as the provider registry hands them on.
func (h *providerHooks) forProviders() *config.Hooks {
	return &config.Hooks{Lock: h.lock, Progress: h.progress}
}

// hookLockTTL is how long a hook lock outlives a holder that died; it is renewed while held.
const hookLockTTL = 30 * time.Second

// lock blocks until this process holds key in egress_locks (or ctx ends), then keeps it
// renewed until release is called. Used by the libvirt provider so a base image is fetched
// once per host however many provisioners serve it.
func (h *providerHooks) lock(ctx context.Context, key string) (func(), error) {
	store, holder, log := h.get()
	if store == nil {
		return nil, errors.New("lock before NATS is connected")
	}
	ttl := cmp.Or(h.ttl, hookLockTTL)
	var l *kvstore.Lock
	for {
		var err error
		l, err = kvstore.AcquireLock(ctx, store.JS, store.Locks, "hook."+key, holder, "provider", ttl)
		if err == nil {
			break
		}
		if !errors.Is(err, kvstore.ErrLockHeld) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := l.KeepRenewed(rctx, ttl/3, nil); err != nil {
			log.Warn("provider lock lost", "key", key, "err", err)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			relCtx, rc := context.WithTimeout(context.Background(), 5*time.Second)
			defer rc()
			_ = l.Release(relCtx)
		})
	}, nil
}

// progress publishes a progress event; providers call it at most about once a second.
func (h *providerHooks) progress(p config.Progress) {
	store, _, log := h.get()
	if store == nil {
		return
	}
	msg := fmt.Sprintf("%s of image %s on %s: %s", p.Phase, p.Image, p.Host, bytesOf(p.Done, p.Total))
	ev := events.Event{V: 1, Kind: events.KindProgress, Proxy: p.Provider, At: time.Now().UTC(), Reason: events.Reason(p.Phase), Message: msg}
	ev.ID = fmt.Sprintf("progress:%s:%s:%s:%d", p.Provider, p.Host, p.Image, ev.At.UnixNano())
	b, _ := json.Marshal(ev)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := store.JS.Publish(ctx, events.EventSubject(events.KindProgress, p.Provider), b, jetstream.WithMsgID(ev.ID)); err != nil && log != nil {
		log.Debug("publish progress", "err", err)
	}
}

func bytesOf(done, total int64) string {
	if total <= 0 {
		return fmt.Sprintf("%.1f MiB", float64(done)/(1<<20))
	}
	return fmt.Sprintf("%.1f of %.1f MiB (%d%%)", float64(done)/(1<<20), float64(total)/(1<<20), done*100/total)
}
