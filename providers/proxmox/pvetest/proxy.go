package pvetest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
)

// ServeFunc serves a booted VM's forward proxy on ln until ctx is done, as
// forwardproxy.Serve does (github.com/egressd/egressd/providers/local/forwardproxy) with
// Config{Listen: ln.Addr().String(), AuthFile: p.AuthFile}. It is passed in rather than
// imported because the repository's dependency rules (deps_test.go) let only cmd/egressd and
// the local provider import providers/local/...; tests are free to import it.
type ServeFunc func(ctx context.Context, ln net.Listener, p Proxy) error

// Proxy is what a VM's image read from its seed's egressd.json, handed to ServeFunc.
type Proxy struct {
	VMID     int
	Name     string         // egressd.json's name
	Addr     netip.AddrPort // where ln listens: the VM's pool address and egressd.json's port
	AuthFile string         // a 0600 file holding egressd.json's auth line; "" without auth
}

// proxy is a running ServeFunc.
type proxy struct {
	cancel context.CancelFunc
	done   chan struct{}
	auth   string // the auth file, removed when the proxy stops
}

// startProxy listens on v's address and the seed's port and serves there until stop or
// Close. The listener is opened here, so that the proxy accepts as soon as the agent
// reports the address. Callers hold s.mu.
func (s *Server) startProxy(v *vm, seed seedResult) (*proxy, error) {
	ap := netip.AddrPortFrom(v.addr, uint16(seed.port))
	p := &proxy{done: make(chan struct{})}
	if seed.auth != "" {
		p.auth = filepath.Join(s.dir, fmt.Sprintf("vm-%d-%d.auth", v.vmid, v.gen))
		if err := os.WriteFile(p.auth, []byte(seed.auth+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("auth file: %w", err)
		}
	}
	ln, err := net.Listen("tcp", ap.String())
	if err != nil {
		os.Remove(p.auth)
		return nil, err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	p.cancel = cancel
	info := Proxy{VMID: v.vmid, Name: seed.name, Addr: ap, AuthFile: p.auth}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(p.done)
		defer ln.Close() // Serve leaves it open when it fails before serving
		if err := s.opts.Serve(ctx, ln, info); err != nil {
			s.opts.Logger.Warn("pvetest: forward proxy stopped", "vmid", info.VMID, "listen", ap, "err", err)
		}
	}()
	return p, nil
}

// stop shuts the proxy down and waits for it; nil is a no-op. Never called with s.mu held:
// a graceful shutdown takes a moment.
func (p *proxy) stop() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
	if p.auth != "" {
		os.Remove(p.auth)
	}
}
