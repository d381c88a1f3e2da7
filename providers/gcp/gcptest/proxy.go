package gcptest

import (
	"context"
	"net"
	"net/netip"
)

// ServeFunc serves a forward proxy on ln until ctx is done, as forwardproxy.Serve does
// (github.com/egressd/egressd/providers/local/forwardproxy). It is passed in rather than
// imported because the repository's dependency rules (deps_test.go) let only cmd/egressd and
// the local provider itself import providers/local/...; tests are free to import it.
type ServeFunc func(ctx context.Context, ln net.Listener) error

// proxy is the forward proxy an instance runs while RUNNING: the "VM" a crawler reaches at
// natIP:ProxyPort.
type proxy struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startProxy listens on addr:ProxyPort and serves there until stop or Close. The listener is
// opened here, so that a RUNNING instance accepts connections as soon as it is reported.
func (s *Server) startProxy(addr netip.Addr) (*proxy, error) {
	listen := netip.AddrPortFrom(addr, uint16(s.opts.ProxyPort)).String()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	p := &proxy{cancel: cancel, done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(p.done)
		defer ln.Close() // Serve leaves it open when it fails before serving
		if err := s.opts.Serve(ctx, ln); err != nil {
			s.opts.Logger.Warn("gcptest: forward proxy stopped", "listen", listen, "err", err)
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
}
