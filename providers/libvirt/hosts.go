package libvirt

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

var errClosed = errors.New("provider is closed")

// hostConns keeps one pooled connection to a host, shared by Create, Get, Delete and List,
// and dials dedicated ones for image transfers and health checks, so that a stalled
// transfer or a slow check never holds up the calls on the pooled one.
type hostConns struct {
	cfg  HostConfig
	dial dialFunc

	// slot admits one dialer at a time, so that concurrent callers share one dial; waiting
	// for it ends with the caller's context.
	slot chan struct{}

	mu     sync.Mutex
	cur    conn
	closed bool
}

func newHostConns(cfg HostConfig, dial dialFunc) *hostConns {
	return &hostConns{cfg: cfg, dial: dial, slot: make(chan struct{}, 1)}
}

// get returns the pooled connection, dialling it if there is none or it died. Dial errors
// are not remembered: the next call dials again.
func (h *hostConns) get(ctx context.Context) (conn, error) {
	if c, err := h.current(); c != nil || err != nil {
		return c, err
	}
	select {
	case h.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the connection to host %s: %w", h.cfg.Name, ctx.Err())
	}
	defer func() { <-h.slot }()
	if c, err := h.current(); c != nil || err != nil {
		return c, err
	}
	c, err := h.dial(ctx, h.cfg, false)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		c.Close()
		return nil, errClosed
	}
	h.cur = c
	return c, nil
}

func (h *hostConns) current() (conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errClosed
	}
	if h.cur != nil && !h.cur.Alive() {
		h.cur.Close()
		h.cur = nil
	}
	return h.cur, nil
}

// fresh dials a connection for one caller, who closes it.
func (h *hostConns) fresh(ctx context.Context) (conn, error) {
	if _, err := h.current(); err != nil {
		return nil, err
	}
	return h.dial(ctx, h.cfg, true)
}

// close drops the pooled connection; later calls fail.
func (h *hostConns) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.cur != nil {
		h.cur.Close()
		h.cur = nil
	}
}
