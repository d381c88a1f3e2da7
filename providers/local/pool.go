package local

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// allocate picks an address for a new instance, other than those in skip, and makes its
// directory, instance.json included, under the state dir's allocation lock: the next
// allocation, in any process, sees the address taken before this one's proxy has even
// started. The directory is the allocation's only record and appears by rename, so a kill -9
// at any point leaves either no allocation (a .tmp- directory the next allocation sweeps) or
// an instance that holds its address until it is deleted.
func (p *Provider) allocate(ctx context.Context, req providers.CreateRequest, skip map[netip.Addr]bool) (*meta, error) {
	ctx, cancel := context.WithTimeout(ctx, p.lockTimeout)
	defer cancel()
	al, err := lockFile(ctx, filepath.Join(p.stateDir, allocLock))
	if err != nil {
		return nil, err
	}
	defer al.release()
	p.sweep()

	used, err := p.usedAddresses()
	if err != nil {
		return nil, err
	}
	for a := range skip {
		used[a] = true
	}
	// After a lost address, from a random point of the pool: whoever took it (another state
	// dir on the same pool) is most likely taking the next ones in order too.
	from := 0
	if len(skip) > 0 {
		from = rand.IntN(len(p.pool))
	}
	addr, err := p.pick(used, req, from)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	m := &meta{
		V:            1,
		ID:           idOf(req.Name),
		Name:         req.Name,
		UID:          req.UID,
		Installation: req.Installation,
		Managed:      true,
		CreatedAt:    now,
		ExpiresAt:    providers.ExpiryOf(now, req.Lifetime),
		Proxy:        req.Proxy,
		Address:      addr.String(),
		Port:         req.Port,
		BindSource:   p.cfg.bindSource(addr),
		Auth:         req.Auth != nil,
	}
	tmp, err := os.MkdirTemp(p.stateDir, tmpPrefix+req.Name+"-")
	if err != nil {
		return nil, err
	}
	if err := p.fill(tmp, m, req); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, p.dir(req.Name)); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return m, nil
}

func (p *Provider) fill(dir string, m *meta, req providers.CreateRequest) error {
	if err := writeAuth(dir, req.Auth); err != nil {
		return err
	}
	return writeMeta(dir, m)
}

// writeAuth writes the proxy's auth file, if it has auth: a password's salted hash, or a
// lease key as it is. The running proxy picks either up at its next request.
func writeAuth(dir string, a *providers.Auth) error {
	switch {
	case a == nil:
		return nil
	case a.Lease():
		return forwardproxy.WriteLeaseKeyFile(filepath.Join(dir, authFile), a.LeaseKey.Reveal())
	default:
		return forwardproxy.WriteAuthFile(filepath.Join(dir, authFile), a.Username, a.Password.Reveal())
	}
}

// sweep removes what crashed calls left: directories being born, which are only ever made
// under the allocation lock the caller holds, and directories being removed, once they are old
// enough that no Delete is still at them.
func (p *Provider) sweep() {
	entries, err := os.ReadDir(p.stateDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, tmpPrefix):
		case strings.HasPrefix(n, trashPrefix):
			if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < time.Minute {
				continue
			}
		default:
			continue
		}
		os.RemoveAll(filepath.Join(p.stateDir, n))
	}
}

// usedAddresses are those in the instance.json of every instance, running or not, managed
// or not: each instance keeps its address for life.
func (p *Provider) usedAddresses() (map[netip.Addr]bool, error) {
	names, err := p.instanceNames()
	if err != nil {
		return nil, err
	}
	used := map[netip.Addr]bool{}
	for _, name := range names {
		m, err := p.readMeta(name)
		if err != nil {
			continue // its process, if any, is caught by the listen test
		}
		if a, err := netip.ParseAddr(m.Address); err == nil {
			used[a.Unmap()] = true
		}
	}
	return used, nil
}

// pick returns the first pool address, from index from on and round, that no instance holds,
// that is not in quarantine (req.Avoid) and on which req.Port can be listened on.
func (p *Provider) pick(used map[netip.Addr]bool, req providers.CreateRequest, from int) (netip.Addr, error) {
	var taken, foreign, quarantined int
	port := req.Port
	for i := range p.pool {
		a := p.pool[(from+i)%len(p.pool)]
		if used[a] {
			taken++
			continue
		}
		if req.Avoided(a) {
			quarantined++
			continue
		}
		err := canListen(a, port)
		switch {
		case err == nil:
			return a, nil
		case errors.Is(err, syscall.EADDRINUSE):
			taken++
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			foreign++
		default:
			// A privileged port, say: the same for every address.
			return netip.Addr{}, err
		}
	}
	msg := fmt.Sprintf("%d addresses, %d held by instances or busy on port %d", len(p.pool), taken, port)
	if foreign > 0 {
		msg += fmt.Sprintf(", %d not on this host", foreign)
	}
	if quarantined > 0 {
		msg += fmt.Sprintf(", %d in quarantine (burned)", quarantined)
	}
	return netip.Addr{}, fmt.Errorf("%w: %s", errPoolExhausted, msg)
}

func canListen(a netip.Addr, port int) error {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(a, uint16(port)).String())
	if err != nil {
		return err
	}
	return ln.Close()
}
