package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// rpcConn is the real conn: go-libvirt over a link, every call under ctx and a budget.
type rpcConn struct {
	l   *link
	lv  *golibvirt.Libvirt
	log *slog.Logger

	rpc, start, upload, xfer time.Duration
}

func newRPCConn(l *link, p *Provider) *rpcConn {
	return &rpcConn{l: l, lv: l.lv, log: p.log, rpc: p.cfg.rpc, start: p.cfg.start, upload: p.cfg.upload, xfer: p.cfg.xfer}
}

// smallUpload is the largest upload the upload budget covers; anything bigger is an image
// transfer.
const smallUpload = 16 << 20

type result[T any] struct {
	v   T
	err error
}

// call runs fn, a go-libvirt call that takes no context, so that the caller gets an answer
// when ctx ends or the budget runs out, whatever libvirt does:
//   - a dead link fails at once, and so does a ctx that has already ended (without touching
//     the link);
//   - a call that overruns its budget kills its link: a call that long means the link or the
//     host is stuck, and the next call redials;
//   - a cancelled call on a dedicated link (a transfer, a check) kills it; on the pooled link,
//     which other callers share, the call is left to finish under its budget instead;
//   - an answer from libvirt never kills the link; a transport error always does.
func call[T any](ctx context.Context, c *rpcConn, name string, budget time.Duration, fn func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s: %w", name, err)
	}
	if !c.l.alive() {
		return zero, fmt.Errorf("%s: %w (%s)", name, errLinkDead, c.l.reason())
	}
	start := time.Now()
	done := make(chan result[T], 1)
	go func() {
		v, err := fn()
		done <- result[T]{v, err}
	}()
	timer := time.NewTimer(budget)
	select {
	case r := <-done:
		timer.Stop()
		c.logCall(name, start, r.err)
		if r.err != nil && !libvirtAnswered(r.err) {
			c.l.kill(name + " failed: " + r.err.Error())
			return zero, fmt.Errorf("%s: %w: %w", name, errLinkDead, r.err)
		}
		if r.err != nil {
			return zero, fmt.Errorf("%s: %w", name, r.err)
		}
		return r.v, nil
	case <-timer.C:
		c.l.kill(name + " exceeded its budget")
		c.logCall(name, start, errBudget)
		return zero, fmt.Errorf("%s: %w of %s", name, errBudget, budget)
	case <-c.l.dead:
		timer.Stop()
		return zero, fmt.Errorf("%s: %w (%s)", name, errLinkDead, c.l.reason())
	case <-ctx.Done():
		if c.l.dedicated {
			timer.Stop()
			c.l.kill(name + " cancelled")
		} else {
			go reap(c.l, name, done, timer)
		}
		c.logCall(name, start, ctx.Err())
		return zero, fmt.Errorf("%s: %w", name, ctx.Err())
	}
}

// reap waits out a call its caller left, killing the link if the call overruns its budget.
func reap[T any](l *link, name string, done <-chan result[T], timer *time.Timer) {
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		l.kill(name + " exceeded its budget after its caller left")
	case <-l.dead:
	}
}

// libvirtAnswered reports whether err is libvirt's answer rather than a transport failure.
func libvirtAnswered(err error) bool {
	_, ok := libvirtCode(err)
	return ok || errors.Is(err, golibvirt.ErrUnsupported)
}

func (c *rpcConn) logCall(name string, start time.Time, err error) {
	if !c.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := []any{"rpc", name, "host", c.l.host, "duration", time.Since(start)}
	if err != nil {
		attrs = append(attrs, "err", err)
		if code, ok := libvirtCode(err); ok {
			attrs = append(attrs, "libvirtCode", int(code))
		}
	}
	c.log.Debug("libvirt call", attrs...)
}

func (c *rpcConn) Alive() bool { return c.l.alive() }
func (c *rpcConn) Close()      { c.l.kill("closed") }

func (c *rpcConn) LibVersion(ctx context.Context) (uint64, error) {
	return call(ctx, c, "ConnectGetLibVersion", c.rpc, c.lv.ConnectGetLibVersion)
}

func (c *rpcConn) Hostname(ctx context.Context) (string, error) {
	return call(ctx, c, "ConnectGetHostname", c.rpc, c.lv.ConnectGetHostname)
}

func (c *rpcConn) LookupPool(ctx context.Context, name string) (golibvirt.StoragePool, error) {
	return call(ctx, c, "StoragePoolLookupByName", c.rpc, func() (golibvirt.StoragePool, error) {
		return c.lv.StoragePoolLookupByName(name)
	})
}

func (c *rpcConn) PoolInfo(ctx context.Context, pool golibvirt.StoragePool) (poolInfo, error) {
	return call(ctx, c, "StoragePoolGetInfo", c.rpc, func() (poolInfo, error) {
		state, capacity, alloc, avail, err := c.lv.StoragePoolGetInfo(pool)
		return poolInfo{State: golibvirt.StoragePoolState(state), Capacity: capacity, Allocation: alloc, Available: avail}, err
	})
}

func (c *rpcConn) RefreshPool(ctx context.Context, pool golibvirt.StoragePool) error {
	_, err := call(ctx, c, "StoragePoolRefresh", c.rpc, func() (struct{}, error) {
		return struct{}{}, c.lv.StoragePoolRefresh(pool, 0)
	})
	return err
}

func (c *rpcConn) ListVolumes(ctx context.Context, pool golibvirt.StoragePool) ([]golibvirt.StorageVol, error) {
	return call(ctx, c, "StoragePoolListAllVolumes", c.rpc, func() ([]golibvirt.StorageVol, error) {
		vols, _, err := c.lv.StoragePoolListAllVolumes(pool, 1, 0)
		return vols, err
	})
}

func (c *rpcConn) LookupVolume(ctx context.Context, pool golibvirt.StoragePool, name string) (golibvirt.StorageVol, error) {
	return call(ctx, c, "StorageVolLookupByName", c.rpc, func() (golibvirt.StorageVol, error) {
		return c.lv.StorageVolLookupByName(pool, name)
	})
}

func (c *rpcConn) CreateVolume(ctx context.Context, pool golibvirt.StoragePool, xml string) (golibvirt.StorageVol, error) {
	return call(ctx, c, "StorageVolCreateXML", c.rpc, func() (golibvirt.StorageVol, error) {
		return c.lv.StorageVolCreateXML(pool, xml, 0)
	})
}

func (c *rpcConn) VolumeInfo(ctx context.Context, vol golibvirt.StorageVol) (volInfo, error) {
	return call(ctx, c, "StorageVolGetInfo", c.rpc, func() (volInfo, error) {
		_, capacity, alloc, err := c.lv.StorageVolGetInfo(vol)
		return volInfo{Capacity: capacity, Allocation: alloc}, err
	})
}

func (c *rpcConn) VolumePath(ctx context.Context, vol golibvirt.StorageVol) (string, error) {
	return call(ctx, c, "StorageVolGetPath", c.rpc, func() (string, error) { return c.lv.StorageVolGetPath(vol) })
}

func (c *rpcConn) VolumeXML(ctx context.Context, vol golibvirt.StorageVol) (string, error) {
	return call(ctx, c, "StorageVolGetXMLDesc", c.rpc, func() (string, error) { return c.lv.StorageVolGetXMLDesc(vol, 0) })
}

// UploadVolume hands go-libvirt an eofReader, so that even a reader that fails cannot wedge
// its stream sender (H2): the stream ends as if the data had, and the real error is returned
// afterwards.
func (c *rpcConn) UploadVolume(ctx context.Context, vol golibvirt.StorageVol, r io.Reader, length uint64) error {
	budget := c.upload
	if length > smallUpload {
		budget = c.xfer
	}
	src := &eofReader{r: r}
	_, err := call(ctx, c, "StorageVolUpload", budget, func() (struct{}, error) {
		return struct{}{}, c.lv.StorageVolUpload(vol, src, 0, length, 0)
	})
	if serr := src.failure(); serr != nil {
		return fmt.Errorf("StorageVolUpload: reading the source: %w", serr)
	}
	return err
}

func (c *rpcConn) DownloadVolume(ctx context.Context, vol golibvirt.StorageVol, w io.Writer, length uint64) error {
	budget := c.upload
	if length > smallUpload {
		budget = c.xfer
	}
	_, err := call(ctx, c, "StorageVolDownload", budget, func() (struct{}, error) {
		return struct{}{}, c.lv.StorageVolDownload(vol, w, 0, length, 0)
	})
	return err
}

func (c *rpcConn) DeleteVolume(ctx context.Context, vol golibvirt.StorageVol) error {
	_, err := call(ctx, c, "StorageVolDelete", c.rpc, func() (struct{}, error) {
		return struct{}{}, c.lv.StorageVolDelete(vol, golibvirt.StorageVolDeleteNormal)
	})
	return err
}

func (c *rpcConn) LookupDomain(ctx context.Context, name string) (golibvirt.Domain, error) {
	return call(ctx, c, "DomainLookupByName", c.rpc, func() (golibvirt.Domain, error) { return c.lv.DomainLookupByName(name) })
}

func (c *rpcConn) DefineDomain(ctx context.Context, xml string) (golibvirt.Domain, error) {
	return call(ctx, c, "DomainDefineXMLFlags", c.rpc, func() (golibvirt.Domain, error) { return c.lv.DomainDefineXMLFlags(xml, 0) })
}

func (c *rpcConn) DomainState(ctx context.Context, dom golibvirt.Domain) (golibvirt.DomainState, error) {
	return call(ctx, c, "DomainGetState", c.rpc, func() (golibvirt.DomainState, error) {
		state, _, err := c.lv.DomainGetState(dom, 0)
		return golibvirt.DomainState(state), err
	})
}

func (c *rpcConn) DomainMetadata(ctx context.Context, dom golibvirt.Domain, ns string) (string, error) {
	return call(ctx, c, "DomainGetMetadata", c.rpc, func() (string, error) {
		return c.lv.DomainGetMetadata(dom, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{ns}, golibvirt.DomainAffectCurrent)
	})
}

func (c *rpcConn) StartDomain(ctx context.Context, dom golibvirt.Domain) error {
	_, err := call(ctx, c, "DomainCreateWithFlags", c.start, func() (golibvirt.Domain, error) { return c.lv.DomainCreateWithFlags(dom, 0) })
	return err
}

func (c *rpcConn) DestroyDomain(ctx context.Context, dom golibvirt.Domain) error {
	_, err := call(ctx, c, "DomainDestroyFlags", c.rpc, func() (struct{}, error) {
		return struct{}{}, c.lv.DomainDestroyFlags(dom, golibvirt.DomainDestroyDefault)
	})
	return err
}

// undefineFlags remove everything libvirt keeps for a domain beside its definition; a
// snapshot or checkpoint left behind would otherwise make undefine fail for ever.
const undefineFlags = golibvirt.DomainUndefineManagedSave | golibvirt.DomainUndefineSnapshotsMetadata |
	golibvirt.DomainUndefineCheckpointsMetadata | golibvirt.DomainUndefineNvram

func (c *rpcConn) UndefineDomain(ctx context.Context, dom golibvirt.Domain) error {
	_, err := call(ctx, c, "DomainUndefineFlags", c.rpc, func() (struct{}, error) {
		return struct{}{}, c.lv.DomainUndefineFlags(dom, undefineFlags)
	})
	return err
}

func (c *rpcConn) ListDomains(ctx context.Context) ([]golibvirt.Domain, error) {
	return call(ctx, c, "ConnectListAllDomains", c.rpc, func() ([]golibvirt.Domain, error) {
		doms, _, err := c.lv.ConnectListAllDomains(1, golibvirt.ConnectListDomainsActive|golibvirt.ConnectListDomainsInactive)
		return doms, err
	})
}

func (c *rpcConn) AgentInterfaces(ctx context.Context, dom golibvirt.Domain) ([]golibvirt.DomainInterface, error) {
	return call(ctx, c, "DomainInterfaceAddresses", c.rpc, func() ([]golibvirt.DomainInterface, error) {
		return c.lv.DomainInterfaceAddresses(dom, uint32(golibvirt.DomainInterfaceAddressesSrcAgent), 0)
	})
}

func (c *rpcConn) LookupNetwork(ctx context.Context, name string) (golibvirt.Network, error) {
	return call(ctx, c, "NetworkLookupByName", c.rpc, func() (golibvirt.Network, error) { return c.lv.NetworkLookupByName(name) })
}

func (c *rpcConn) DHCPLeases(ctx context.Context, net golibvirt.Network, mac string) ([]golibvirt.NetworkDhcpLease, error) {
	var filter golibvirt.OptString
	if mac != "" {
		filter = golibvirt.OptString{mac}
	}
	return call(ctx, c, "NetworkGetDhcpLeases", c.rpc, func() ([]golibvirt.NetworkDhcpLease, error) {
		leases, _, err := c.lv.NetworkGetDhcpLeases(net, filter, 1, 0)
		return leases, err
	})
}

// eofReader ends the stream cleanly on any error of its source and keeps the error for the
// caller. go-libvirt must never see a failing reader: its stream sender and its caller could
// then wait on each other for ever (H2).
type eofReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.mu.Lock()
		e.err = err
		e.mu.Unlock()
		return n, io.EOF
	}
	return n, err
}

func (e *eofReader) failure() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}
