package local

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers"
)

// Create starts the instance named req.Name, or returns it if it runs. An instance whose
// process died is restarted on its address and port, with its marks. A new instance takes a
// pool address no other instance holds and that can listen on req.Port; ErrQuota when there
// is none.
//
// Create blocks until the proxy listens, so it returns Running. An auth credential in req is
// (re)written for a running proxy, which picks it up without a restart; adding or removing
// auth restarts the proxy.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	id := idOf(req.Name)
	if err := checkRequest(req); err != nil {
		return providers.Instance{}, p.classify("create", id, err)
	}
	inst, err := p.create(ctx, req)
	return inst, p.classify("create", id, err)
}

func checkRequest(req providers.CreateRequest) error {
	var errs []error
	if err := validName(req.Name); err != nil {
		errs = append(errs, err)
	}
	if req.UID == "" {
		errs = append(errs, fmt.Errorf("%w: uid is required", errBadRequest))
	}
	if req.Port < 1 || req.Port > 65535 {
		errs = append(errs, fmt.Errorf("%w: port must be between 1 and 65535, got %d", errBadRequest, req.Port))
	}
	if req.Host != "" && req.Host != hostName {
		errs = append(errs, fmt.Errorf("%w: host %q does not exist (the only host is %q)", errBadRequest, req.Host, hostName))
	}
	if req.Auth.Lease() {
		if _, err := leaseauth.ParseKeyLines(req.Auth.LeaseKey.Reveal()); err != nil {
			errs = append(errs, fmt.Errorf("%w: auth.leaseKey: %w", errBadRequest, err))
		}
	}
	if req.Auth != nil && !req.Auth.Lease() && (req.Auth.Username == "" || strings.ContainsAny(req.Auth.Username, ":\r\n")) {
		errs = append(errs, fmt.Errorf("%w: auth.username must be non-empty and hold no ':' or line break", errBadRequest))
	}
	return errors.Join(errs...)
}

func (p *Provider) create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return providers.Instance{}, err
	}
	l, err := p.lock(ctx, req.Name)
	if err != nil {
		return providers.Instance{}, err
	}
	defer l.release()

	m, err := p.readMeta(req.Name)
	if errors.Is(err, errNoInstance) {
		return p.createNew(ctx, req, l)
	}
	if err != nil {
		return providers.Instance{}, err
	}
	return p.ensureRunning(ctx, req, m, l)
}

// maxAddressTries bounds how many addresses one Create tries when each is taken by a
// listener this state dir does not know of between the pick and the proxy's bind.
const maxAddressTries = 5

func (p *Provider) createNew(ctx context.Context, req providers.CreateRequest, l *held) (providers.Instance, error) {
	lost := map[netip.Addr]bool{}
	for {
		m, err := p.allocate(ctx, req, lost)
		if err != nil {
			return providers.Instance{}, err
		}
		inst, err := p.start(ctx, m, l.file)
		if err == nil {
			p.log.Info("instance created", "instance", m.Name, "address", m.Address, "port", m.Port)
			return inst, nil
		}
		// Nothing of a first start that failed stays behind, so that the next Create picks
		// an address afresh rather than retrying one that may be taken.
		if rerr := p.remove(context.Background(), m.Name, l); rerr != nil {
			p.log.Warn("cleaning up after a failed start", "instance", m.Name, "err", rerr)
			return providers.Instance{}, err
		}
		// The pick saw the address free, and allocations of this state dir are serialized,
		// so what took it since is outside the state dir: another state dir given the same
		// addresses (a second installation or test run on the host), or any other program.
		// It says nothing of the other addresses, so try another rather than fail the op.
		addr, _ := netip.ParseAddr(m.Address)
		if !errors.Is(err, syscall.EADDRINUSE) || len(lost)+1 >= maxAddressTries || ctx.Err() != nil {
			return providers.Instance{}, err
		}
		p.log.Warn("address taken by a listener outside the state dir while the proxy started; trying another",
			"instance", m.Name, "address", m.Address, "port", m.Port)
		lost[addr] = true
	}
}

func (p *Provider) ensureRunning(ctx context.Context, req providers.CreateRequest, m *meta, l *held) (providers.Instance, error) {
	if m.UID != req.UID || m.Installation != req.Installation {
		return providers.Instance{}, fmt.Errorf("%w: %s belongs to uid %q of installation %q", errConflict, m.Name, m.UID, m.Installation)
	}
	dir := p.dir(m.Name)
	if err := writeAuth(dir, req.Auth); err != nil {
		return providers.Instance{}, err
	}
	marker := p.pidPath(m.Name)
	pid, _ := readPID(marker)
	wantAuth := req.Auth != nil
	// A create of the name asking another port meets an instance built from an older spec
	// (one whose delete a crash overtook, met again under its name). Returned as it is, it
	// would pass for the new spec's and serve on the old port for good: it restarts on the
	// port asked for.
	moved := m.Port != req.Port
	if alive(pid, marker) && wantAuth == m.Auth && !moved {
		return p.describe(m), nil
	}
	// Whatever still carries the instance's mark (a proxy that is about to be restarted with
	// other flags, or one whose starter died before it wrote its pid file) would hold the
	// address the new one needs.
	if err := stop(ctx, findProcesses(marker), marker, p.stopGrace); err != nil {
		return providers.Instance{}, err
	}
	if wantAuth != m.Auth || moved {
		if !wantAuth {
			if err := os.Remove(filepath.Join(dir, authFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return providers.Instance{}, err
			}
		}
		m.Auth, m.Port = wantAuth, req.Port
		if err := writeMeta(dir, m); err != nil {
			return providers.Instance{}, err
		}
	}
	inst, err := p.start(ctx, m, l.file)
	if err != nil {
		return providers.Instance{}, err
	}
	p.log.Info("instance restarted", "instance", m.Name, "address", m.Address, "port", m.Port)
	return inst, nil
}
