package providers

import (
	"context"
	"sync"
)

// KeyedMutex is a mutex per key (an instance name) whose Lock honours a context, for
// providers that must serialise calls on one instance within a process. Entries vanish when
// nobody holds or waits for them. The zero value is ready to use.
type KeyedMutex struct {
	mu   sync.Mutex
	keys map[string]*keyedEntry
}

type keyedEntry struct {
	sem  chan struct{}
	refs int
}

// Lock waits for key's mutex or for ctx to end. unlock may be called more than once.
func (k *KeyedMutex) Lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.keys == nil {
		k.keys = map[string]*keyedEntry{}
	}
	e := k.keys[key]
	if e == nil {
		e = &keyedEntry{sem: make(chan struct{}, 1)}
		k.keys[key] = e
	}
	e.refs++
	k.mu.Unlock()

	release := func() {
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.keys, key)
		}
		k.mu.Unlock()
	}
	select {
	case e.sem <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-e.sem; release() }) }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
