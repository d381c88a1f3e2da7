package libvirt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// fakeCloud is an in-memory libvirt behind the conn seam: hosts with pools, volumes, domains
// and networks, shared by any number of provider objects, each a "process" (fakeProc) that can
// be crashed. It answers with the error codes libvirt uses, selects metadata strictly by
// namespace and prints it without the xmlns, as libvirt does.
type fakeCloud struct {
	mu      sync.Mutex
	hosts   map[string]*fakeHost
	nextIP  int
	calls   map[string]int // method → calls
	uploads map[string]int // volume → successful uploads
	bad     []string       // things real libvirt would allow but egressd must never do

	// before runs at the start of every call, outside the lock; an error fails the call.
	before func(proc *fakeProc, method, subject string) error
	// crashAt says whether a successful call kills the process that made it (its result
	// never reaches the provider, and none of its later calls land), like kill -9.
	crashAt func(method, subject string) bool
}

type fakeHost struct {
	name     string
	pools    map[string]*fakePool
	domains  map[string]*fakeDomain
	networks map[string]*fakeNetwork
	agent    bool // guest agents answer
	down     bool // dials fail
}

type fakePool struct {
	state    golibvirt.StoragePoolState
	capacity uint64
	vols     map[string]*fakeVol
}

type fakeVol struct {
	name, path, format string
	capacity           uint64
	data               []byte
	backing            string
	mtime              time.Time
}

type fakeDomain struct {
	name    string
	uuid    golibvirt.UUID
	meta    map[string]string // namespace → element as libvirt prints it
	state   golibvirt.DomainState
	mac     string
	network string
	disks   []string
}

type fakeNetwork struct {
	leases []golibvirt.NetworkDhcpLease
}

const fakePoolPath = "/var/lib/libvirt/images"

func newFakeCloud(hosts ...string) *fakeCloud {
	if len(hosts) == 0 {
		hosts = []string{"h1"}
	}
	f := &fakeCloud{hosts: map[string]*fakeHost{}, calls: map[string]int{}, uploads: map[string]int{}}
	for _, h := range hosts {
		f.hosts[h] = &fakeHost{
			name:     h,
			pools:    map[string]*fakePool{"default": {state: golibvirt.StoragePoolRunning, capacity: 1 << 40, vols: map[string]*fakeVol{}}},
			domains:  map[string]*fakeDomain{},
			networks: map[string]*fakeNetwork{"default": {}},
		}
	}
	return f
}

// fakeProc is one process's view of the cloud.
type fakeProc struct {
	cloud   *fakeCloud
	crashed atomic.Bool
	dials   atomic.Int64
}

func (f *fakeCloud) proc() *fakeProc { return &fakeProc{cloud: f} }

func (pr *fakeProc) dial(ctx context.Context, h HostConfig, dedicated bool) (conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, &dialError{Stage: stageTCP, Host: h.Name, Err: err}
	}
	if pr.crashed.Load() {
		return nil, &dialError{Stage: stageTCP, Host: h.Name, Err: errors.New("process is dead")}
	}
	pr.dials.Add(1)
	pr.cloud.mu.Lock()
	host := pr.cloud.hosts[h.Name]
	down := host == nil || host.down
	pr.cloud.mu.Unlock()
	if down {
		return nil, &dialError{Stage: stageTCP, Host: h.Name, Err: errors.New("connection refused")}
	}
	return &fakeConn{proc: pr, f: pr.cloud, host: h.Name, pool: h.Pool}, nil
}

type fakeConn struct {
	proc   *fakeProc
	f      *fakeCloud
	host   string
	pool   string
	closed atomic.Bool
}

func lverr(code golibvirt.ErrorNumber, format string, args ...any) error {
	return golibvirt.Error{Code: uint32(code), Message: fmt.Sprintf(format, args...)}
}

// enter starts a call: it fails like the real conn would for an ended ctx or a dead link,
// counts the call and runs the test's hook. The lock is held on return without an error.
func (c *fakeConn) enter(ctx context.Context, method, subject string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	if !c.Alive() {
		return fmt.Errorf("%s: %w", method, errLinkDead)
	}
	c.f.mu.Lock()
	c.f.calls[method]++
	before := c.f.before
	c.f.mu.Unlock()
	if before != nil {
		if err := before(c.proc, method, subject); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
	}
	c.f.mu.Lock()
	return nil
}

// leave ends a call that did its work; if it is the crash point, the process dies now.
func (c *fakeConn) leave(method, subject string, err error) error {
	crash := err == nil && c.f.crashAt != nil && c.f.crashAt(method, subject)
	c.f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	if crash {
		c.proc.crashed.Store(true)
		return fmt.Errorf("%s: %w: killed after the call took effect", method, errLinkDead)
	}
	return nil
}

func (c *fakeConn) Alive() bool {
	c.f.mu.Lock()
	down := c.f.hosts[c.host].down
	c.f.mu.Unlock()
	return !down && !c.closed.Load() && !c.proc.crashed.Load()
}
func (c *fakeConn) Close() { c.closed.Store(true) }

func (c *fakeConn) h() *fakeHost { return c.f.hosts[c.host] }

func (c *fakeConn) LibVersion(ctx context.Context) (uint64, error) {
	if err := c.enter(ctx, "LibVersion", ""); err != nil {
		return 0, err
	}
	return 9000000, c.leave("LibVersion", "", nil)
}

func (c *fakeConn) Hostname(ctx context.Context) (string, error) {
	if err := c.enter(ctx, "Hostname", ""); err != nil {
		return "", err
	}
	return c.host + ".example", c.leave("Hostname", "", nil)
}

func (c *fakeConn) LookupPool(ctx context.Context, name string) (golibvirt.StoragePool, error) {
	if err := c.enter(ctx, "LookupPool", name); err != nil {
		return golibvirt.StoragePool{}, err
	}
	if c.h().pools[name] == nil {
		return golibvirt.StoragePool{}, c.leave("LookupPool", name, lverr(golibvirt.ErrNoStoragePool, "Storage pool not found: no storage pool with matching name '%s'", name))
	}
	return golibvirt.StoragePool{Name: name}, c.leave("LookupPool", name, nil)
}

func (p *fakePool) used() uint64 {
	var n uint64
	for _, v := range p.vols {
		n += uint64(len(v.data))
	}
	return n
}

func (c *fakeConn) PoolInfo(ctx context.Context, pool golibvirt.StoragePool) (poolInfo, error) {
	if err := c.enter(ctx, "PoolInfo", pool.Name); err != nil {
		return poolInfo{}, err
	}
	p := c.h().pools[pool.Name]
	if p == nil {
		return poolInfo{}, c.leave("PoolInfo", pool.Name, lverr(golibvirt.ErrNoStoragePool, "no pool"))
	}
	used := min(p.used(), p.capacity)
	return poolInfo{State: p.state, Capacity: p.capacity, Allocation: used, Available: p.capacity - used}, c.leave("PoolInfo", pool.Name, nil)
}

func (c *fakeConn) RefreshPool(ctx context.Context, pool golibvirt.StoragePool) error {
	if err := c.enter(ctx, "RefreshPool", pool.Name); err != nil {
		return err
	}
	return c.leave("RefreshPool", pool.Name, nil)
}

func (c *fakeConn) ListVolumes(ctx context.Context, pool golibvirt.StoragePool) ([]golibvirt.StorageVol, error) {
	if err := c.enter(ctx, "ListVolumes", pool.Name); err != nil {
		return nil, err
	}
	var out []golibvirt.StorageVol
	for _, name := range sortedKeys(c.h().pools[pool.Name].vols) {
		out = append(out, golibvirt.StorageVol{Pool: pool.Name, Name: name, Key: fakePoolPath + "/" + name})
	}
	return out, c.leave("ListVolumes", pool.Name, nil)
}

func (c *fakeConn) vol(v golibvirt.StorageVol) (*fakeVol, error) {
	p := c.h().pools[v.Pool]
	if p == nil || p.vols[v.Name] == nil {
		return nil, lverr(golibvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching name '%s'", v.Name)
	}
	return p.vols[v.Name], nil
}

func (c *fakeConn) LookupVolume(ctx context.Context, pool golibvirt.StoragePool, name string) (golibvirt.StorageVol, error) {
	if err := c.enter(ctx, "LookupVolume", name); err != nil {
		return golibvirt.StorageVol{}, err
	}
	v := golibvirt.StorageVol{Pool: pool.Name, Name: name, Key: fakePoolPath + "/" + name}
	_, err := c.vol(v)
	return v, c.leave("LookupVolume", name, err)
}

type fakeVolDoc struct {
	Name     string `xml:"name"`
	Capacity uint64 `xml:"capacity"`
	Format   struct {
		Type string `xml:"type,attr"`
	} `xml:"target>format"`
	Backing string `xml:"backingStore>path"`
}

func (c *fakeConn) CreateVolume(ctx context.Context, pool golibvirt.StoragePool, doc string) (golibvirt.StorageVol, error) {
	var d fakeVolDoc
	if err := xml.Unmarshal([]byte(doc), &d); err != nil {
		return golibvirt.StorageVol{}, lverr(golibvirt.ErrXMLError, "bad volume XML: %v", err)
	}
	if err := c.enter(ctx, "CreateVolume", d.Name); err != nil {
		return golibvirt.StorageVol{}, err
	}
	p := c.h().pools[pool.Name]
	if p.vols[d.Name] != nil {
		return golibvirt.StorageVol{}, c.leave("CreateVolume", d.Name, lverr(golibvirt.ErrStorageVolExist, "storage volume '%s' exists already", d.Name))
	}
	if d.Backing != "" && !c.pathExists(d.Backing) {
		return golibvirt.StorageVol{}, c.leave("CreateVolume", d.Name, lverr(golibvirt.ErrInternalError, "backing store %s does not exist", d.Backing))
	}
	p.vols[d.Name] = &fakeVol{name: d.Name, path: fakePoolPath + "/" + d.Name, format: d.Format.Type, capacity: d.Capacity, backing: d.Backing, mtime: time.Now()}
	return golibvirt.StorageVol{Pool: pool.Name, Name: d.Name, Key: fakePoolPath + "/" + d.Name}, c.leave("CreateVolume", d.Name, nil)
}

func (c *fakeConn) pathExists(path string) bool {
	for _, p := range c.h().pools {
		for _, v := range p.vols {
			if v.path == path {
				return true
			}
		}
	}
	return false
}

func (c *fakeConn) VolumeInfo(ctx context.Context, vol golibvirt.StorageVol) (volInfo, error) {
	if err := c.enter(ctx, "VolumeInfo", vol.Name); err != nil {
		return volInfo{}, err
	}
	v, err := c.vol(vol)
	if err != nil {
		return volInfo{}, c.leave("VolumeInfo", vol.Name, err)
	}
	capacity := v.capacity
	if len(v.data) >= 32 && bytes.HasPrefix(v.data, qcow2Magic) {
		capacity = binary.BigEndian.Uint64(v.data[24:32]) // libvirt probes the format
	}
	return volInfo{Capacity: capacity, Allocation: uint64(len(v.data))}, c.leave("VolumeInfo", vol.Name, nil)
}

func (c *fakeConn) VolumePath(ctx context.Context, vol golibvirt.StorageVol) (string, error) {
	if err := c.enter(ctx, "VolumePath", vol.Name); err != nil {
		return "", err
	}
	v, err := c.vol(vol)
	if err != nil {
		return "", c.leave("VolumePath", vol.Name, err)
	}
	return v.path, c.leave("VolumePath", vol.Name, nil)
}

func (c *fakeConn) VolumeXML(ctx context.Context, vol golibvirt.StorageVol) (string, error) {
	if err := c.enter(ctx, "VolumeXML", vol.Name); err != nil {
		return "", err
	}
	v, err := c.vol(vol)
	if err != nil {
		return "", c.leave("VolumeXML", vol.Name, err)
	}
	doc := fmt.Sprintf("<volume type='file'><name>%s</name><target><path>%s</path><timestamps><mtime>%d.%09d</mtime></timestamps></target>",
		v.name, v.path, v.mtime.Unix(), v.mtime.Nanosecond())
	if v.backing != "" {
		doc += fmt.Sprintf("<backingStore><path>%s</path><format type='qcow2'/></backingStore>", v.backing)
	}
	doc += "</volume>"
	return doc, c.leave("VolumeXML", vol.Name, nil)
}

func (c *fakeConn) UploadVolume(ctx context.Context, vol golibvirt.StorageVol, r io.Reader, length uint64) error {
	data, rerr := io.ReadAll(io.LimitReader(r, int64(length)))
	if err := c.enter(ctx, "UploadVolume", vol.Name); err != nil {
		return err
	}
	v, err := c.vol(vol)
	switch {
	case err != nil:
	case rerr != nil:
		err = rerr
	case length > v.capacity:
		err = lverr(golibvirt.ErrInvalidArg, "upload of %d bytes is larger than volume %s", length, vol.Name)
	default:
		v.data, v.mtime = data, time.Now()
		c.f.uploads[vol.Name]++
	}
	return c.leave("UploadVolume", vol.Name, err)
}

func (c *fakeConn) DownloadVolume(ctx context.Context, vol golibvirt.StorageVol, w io.Writer, length uint64) error {
	if err := c.enter(ctx, "DownloadVolume", vol.Name); err != nil {
		return err
	}
	v, err := c.vol(vol)
	var data []byte
	if err == nil {
		data = slices.Clone(v.data[:min(uint64(len(v.data)), length)])
	}
	if err := c.leave("DownloadVolume", vol.Name, err); err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func (c *fakeConn) DeleteVolume(ctx context.Context, vol golibvirt.StorageVol) error {
	if err := c.enter(ctx, "DeleteVolume", vol.Name); err != nil {
		return err
	}
	v, err := c.vol(vol)
	if err == nil {
		for _, p := range c.h().pools {
			for _, o := range p.vols {
				if o.backing == v.path {
					c.f.bad = append(c.f.bad, fmt.Sprintf("deleted %s under the overlay %s", v.name, o.name))
				}
			}
		}
		delete(c.h().pools[vol.Pool].vols, vol.Name)
	}
	return c.leave("DeleteVolume", vol.Name, err)
}

func (c *fakeConn) dom(d golibvirt.Domain) (*fakeDomain, error) {
	if fd := c.h().domains[d.Name]; fd != nil {
		return fd, nil
	}
	return nil, lverr(golibvirt.ErrNoDomain, "Domain not found: no domain with matching name '%s'", d.Name)
}

// Inspection helpers for tests; each takes the lock.

func (f *fakeCloud) volumes(host string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.hosts[host].pools["default"].vols)
}

func (f *fakeCloud) domains(host string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.hosts[host].domains)
}

func (f *fakeCloud) domain(host, name string) *fakeDomain {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.hosts[host].domains[name]; d != nil {
		cp := *d
		return &cp
	}
	return nil
}

func (f *fakeCloud) volume(host, name string) *fakeVol {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v := f.hosts[host].pools["default"].vols[name]; v != nil {
		cp := *v
		return &cp
	}
	return nil
}

func (f *fakeCloud) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *fakeCloud) uploadsOf(vol string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.uploads[vol]
}

func (f *fakeCloud) violations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.bad)
}

func (f *fakeCloud) with(fn func(f *fakeCloud)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}
