package gcptest

import (
	"context"
	"net"
	"net/netip"
	"strconv"
)

// ServeFunc serves a forward proxy on ln until ctx is done, as forwardproxy.Serve does
// (github.com/egressd/egressd/providers/local/forwardproxy). It is passed in rather than
// imported because the repository's dependency rules (deps_test.go) let only cmd/egressd and
// the local provider itself import providers/local/...; tests are free to import it.
type ServeFunc func(ctx context.Context, ln net.Listener) error

// VM is what a booting instance's image sees of itself: its name, zone and metadata items
// (user-data and whatever else the provider put there), as the metadata server serves them.
type VM struct {
	Name     string
	Zone     string
	Metadata map[string]string
}

// BootFunc is a RUNNING instance's startup: from the VM's metadata, the port its proxy
// listens on and the proxy itself. It is called with the simulator's lock held: it must
// not call the simulator.
type BootFunc func(vm VM) (port int, serve ServeFunc, err error)

// proxy is the forward proxy an instance runs while RUNNING: the "VM" a crawler reaches at
// natIP:port.
type proxy struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startProxy boots inst (Options.Boot, or ProxyPort and Serve), listens on its address and
// serves there until stop or Close. The listener is opened here, so that a RUNNING instance
// accepts connections as soon as it is reported. A Boot error is a VM whose proxy did not
// start: nil proxy, no error. Callers hold s.mu.
func (s *Server) startProxy(inst *instance) (*proxy, error) {
	port, serve := s.opts.ProxyPort, s.opts.Serve
	if s.opts.Boot != nil {
		vm := VM{Name: inst.pb.GetName(), Zone: inst.zone, Metadata: map[string]string{}}
		for _, it := range inst.pb.GetMetadata().GetItems() {
			vm.Metadata[it.GetKey()] = it.GetValue()
		}
		var err error
		if port, serve, err = s.opts.Boot(vm); err != nil {
			s.opts.Logger.Warn("gcptest: the instance's proxy did not start", "instance", vm.Name, "err", err)
			return nil, nil
		}
	}
	listen := netip.AddrPortFrom(inst.addr, uint16(port)).String()
	if port <= 0 || port > 65535 {
		return nil, &net.AddrError{Err: "port " + strconv.Itoa(port) + " out of range", Addr: listen}
	}
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
		if err := serve(ctx, ln); err != nil {
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
