package libvirt

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/nocloud"
)

// plan is a request checked and resolved against the config, before any dial.
type plan struct {
	req      providers.CreateRequest
	id       string
	host     *hostConns
	imageKey string
	image    ImageConfig
	machine  MachineType
}

// Create makes sure the domain named req.Name exists on the chosen host and is started, and
// returns it (usually Provisioning: the guest has no address yet). Every step is idempotent
// and a later Create picks up after a crash at any of them:
//
//  1. the request and its placement are checked (Permanent, naming the field);
//  2. an existing domain of that name is adopted if its marks say it is this proxy's, and
//     refused (Permanent) otherwise;
//  3. the pool must have room for the instance (Quota);
//  4. the base image is fetched into the pool once per host (see ensureImage);
//  5. the overlay and the seed ISO are made afresh;
//  6. the domain is defined with its marks and started.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	pl, err := p.plan(req)
	if err != nil {
		return providers.Instance{}, p.classify(opCreate, req.Name, err)
	}
	inst, err := p.create(ctx, pl)
	return inst, p.classify(opCreate, pl.id, err)
}

func (p *Provider) plan(req providers.CreateRequest) (plan, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...)))
	}
	for _, err := range nocloud.CheckRequest(req) {
		bad("%v", err)
	}
	if req.UID == "" {
		bad("uid is required")
	}
	if req.Installation == "" {
		bad("installation is required")
	}
	pl := plan{req: req}
	zone := req.Placement.Zone
	hostName, field := req.Host, "host"
	if hostName == "" {
		hostName, field = zone, "placement.zone"
	}
	switch {
	case hostName == "" && len(p.cfg.Hosts) == 1:
		hostName = p.cfg.Hosts[0].Name
	case hostName == "":
		bad("placement.zone is required when hosts lists more than one host (%s)", strings.Join(p.hostNames(), ", "))
	case zone != "" && zone != hostName:
		bad("placement.zone %q differs from the host %q chosen for it", zone, hostName)
	}
	if hostName != "" {
		if pl.host = p.hosts[hostName]; pl.host == nil {
			bad("%s %q is not in hosts (%s)", field, hostName, strings.Join(p.hostNames(), ", "))
		}
	}
	var ok bool
	pl.imageKey, ok = providers.PickKey(req.Placement.Image, p.cfg.Images)
	if !ok {
		bad("placement.image %q is not a key of images (%s)", req.Placement.Image, strings.Join(sortedKeys(p.cfg.Images), ", "))
	}
	pl.image = p.cfg.Images[pl.imageKey]
	var mtKey string
	mtKey, ok = providers.PickKey(req.Placement.MachineType, p.cfg.MachineTypes)
	if !ok {
		bad("placement.machineType %q is not a key of machineTypes (%s)", req.Placement.MachineType, strings.Join(sortedKeys(p.cfg.MachineTypes), ", "))
	}
	pl.machine = p.cfg.MachineTypes[mtKey]
	if len(errs) > 0 {
		return plan{}, errors.Join(errs...)
	}
	pl.id = idOf(pl.host.cfg.Name, req.Name)
	return pl, nil
}

func (p *Provider) create(ctx context.Context, pl plan) (providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return providers.Instance{}, err
	}
	name, h := pl.req.Name, pl.host
	log := p.log.With("host", h.cfg.Name, "name", name)
	log.Debug("libvirt create resolved", "image", pl.imageKey, "vcpus", pl.machine.VCPUs,
		"memoryMiB", pl.machine.MemoryMiB, "userDataBytes", len(pl.req.UserData))
	unlock, err := p.lockName(ctx, h.cfg.Name, name)
	if err != nil {
		return providers.Instance{}, err
	}
	defer unlock()

	c, err := h.get(ctx)
	if err != nil {
		return providers.Instance{}, err
	}
	dom, err := c.LookupDomain(ctx, name)
	switch {
	case err == nil:
		log.Debug("libvirt domain already defined")
		return p.adopt(ctx, c, pl, dom)
	case !isCode(err, golibvirt.ErrNoDomain):
		return providers.Instance{}, err
	}

	pool, err := c.LookupPool(ctx, h.cfg.Pool)
	if err != nil {
		return providers.Instance{}, err
	}
	if err := p.checkSpace(ctx, c, pool, h.cfg, 0); err != nil {
		return providers.Instance{}, err
	}
	base, err := p.ensureImage(ctx, h, c, pool, pl.imageKey)
	if err != nil {
		return providers.Instance{}, err
	}
	// A first fetch may have taken minutes; carry on over a live connection.
	if c, err = h.get(ctx); err != nil {
		return providers.Instance{}, err
	}
	overlay, err := p.makeOverlay(ctx, c, pool, name, base)
	if err != nil {
		return providers.Instance{}, err
	}
	log.Debug("libvirt overlay volume created", "capacity", max(base.VirtualSize, p.cfg.diskBytes))
	seed, err := p.writeSeed(ctx, c, pool, pl)
	if err != nil {
		return providers.Instance{}, err
	}
	log.Debug("libvirt seed volume uploaded")

	m := marks{
		Managed: true, UID: pl.req.UID, Installation: pl.req.Installation,
		Provider: p.name, Proxy: pl.req.Proxy, Port: pl.req.Port, MAC: randomMAC(), Image: pl.imageKey,
	}
	m.CreatedAt, m.ExpiresAt = stamp(p.now(), pl.req.Lifetime)
	doc, err := domainXML(domainSpec{
		Name: name, DomainType: p.cfg.DomainType, VCPUs: pl.machine.VCPUs, MemoryMiB: pl.machine.MemoryMiB,
		Firmware: pl.image.Firmware, OverlayPath: overlay, SeedPath: seed, Host: h.cfg, Marks: m,
	})
	if err != nil {
		return providers.Instance{}, err
	}
	log.Debug("libvirt domain XML", "xml", doc)
	if dom, err = c.DefineDomain(ctx, doc); err != nil {
		return providers.Instance{}, err
	}
	log.Info("libvirt domain defined", "mac", m.MAC)
	if err := p.ensureRunning(ctx, c, dom, log); err != nil {
		return providers.Instance{}, err
	}
	return p.describe(ctx, c, h, dom, m)
}

// adopt returns an existing domain, started, if its marks are this request's.
func (p *Provider) adopt(ctx context.Context, c conn, pl plan, dom golibvirt.Domain) (providers.Instance, error) {
	h := pl.host.cfg.Name
	m, found, err := readMarks(ctx, c, dom)
	switch {
	case err != nil:
		return providers.Instance{}, err
	case !found || !m.Managed:
		return providers.Instance{}, fmt.Errorf("%w: domain %s on host %s carries no egressd mark; it was not created by egressd", errForeign, dom.Name, h)
	case m.UID != pl.req.UID || m.Installation != pl.req.Installation:
		return providers.Instance{}, fmt.Errorf("%w: domain %s on host %s belongs to uid %q of installation %q, not uid %q of installation %q",
			errForeign, dom.Name, h, m.UID, m.Installation, pl.req.UID, pl.req.Installation)
	}
	if err := p.ensureRunning(ctx, c, dom, p.log.With("host", h, "name", dom.Name)); err != nil {
		return providers.Instance{}, err
	}
	return p.describe(ctx, c, pl.host, dom, m)
}

// seedReserve is room kept in the pool for a seed ISO.
const seedReserve = 16 << 20

// checkSpace fails with a Quota error unless the pool has room for an instance's disk, its
// seed and imageBytes more, beyond the reserve. Overlays are thin, so this is conservative.
func (p *Provider) checkSpace(ctx context.Context, c conn, pool golibvirt.StoragePool, h HostConfig, imageBytes uint64) error {
	// libvirt caches a pool's numbers until a refresh. A refresh fails while an upload
	// streams into the pool; the cached numbers then have to do.
	if err := c.RefreshPool(ctx, pool); err != nil {
		if !libvirtAnswered(err) {
			return err
		}
		p.log.Debug("libvirt pool refresh failed; using cached numbers", "host", h.Name, "pool", h.Pool, "err", err)
	}
	info, err := c.PoolInfo(ctx, pool)
	if err != nil {
		return err
	}
	if info.State != golibvirt.StoragePoolRunning {
		return fmt.Errorf("%w: storage pool %s on host %s is %s", errPoolDown, h.Pool, h.Name, poolStateWord(info.State))
	}
	reserve := info.Capacity / 100 * p.cfg.reservePercent
	need := imageBytes + p.cfg.diskBytes + seedReserve
	if info.Available < reserve || info.Available-reserve < need {
		return fmt.Errorf("%w: storage pool %s on host %s has %s available (%d%% of %s kept in reserve); %s needed",
			errNoSpace, h.Pool, h.Name, gib(info.Available), p.cfg.reservePercent, gib(info.Capacity), gib(need))
	}
	return nil
}

// makeOverlay makes the instance's disk afresh: a qcow2 overlay of the base at least as large
// as the image (a smaller one leaves the guest without its file system) and diskSizeGb. A
// leftover from a crashed Create or Delete is replaced: no domain uses it, and a replacement
// proxy must not boot on its predecessor's disk.
func (p *Provider) makeOverlay(ctx context.Context, c conn, pool golibvirt.StoragePool, name string, base baseImage) (string, error) {
	vname := overlayVolume(name)
	if err := discard(ctx, c, pool, vname); err != nil {
		return "", err
	}
	capacity := max(base.VirtualSize, p.cfg.diskBytes)
	vol, err := c.CreateVolume(ctx, pool, volumeXML(vname, formatQCOW2, capacity, base.Path, base.Format))
	if err != nil {
		return "", err
	}
	return c.VolumePath(ctx, vol)
}

// writeSeed builds and uploads the seed ISO, replacing any earlier one: an earlier attempt may
// have been cut off mid-upload, and a truncated seed boots a guest without its user-data.
func (p *Provider) writeSeed(ctx context.Context, c conn, pool golibvirt.StoragePool, pl plan) (string, error) {
	iso, err := nocloud.Build(nocloud.Spec{
		Name: pl.req.Name, UserData: pl.req.UserData, VendorData: p.cfg.VendorData,
		Agent: p.cfg.installAgent, Port: pl.req.Port, Auth: pl.req.Auth,
	})
	if err != nil {
		return "", fmt.Errorf("%w: %w", errLocal, err)
	}
	vname := seedVolume(pl.req.Name)
	if err := discard(ctx, c, pool, vname); err != nil {
		return "", err
	}
	vol, err := c.CreateVolume(ctx, pool, volumeXML(vname, formatRaw, uint64(len(iso)), "", ""))
	if err != nil {
		return "", err
	}
	if err := c.UploadVolume(ctx, vol, bytes.NewReader(iso), uint64(len(iso))); err != nil {
		return "", err
	}
	return c.VolumePath(ctx, vol)
}

// ensureRunning starts a domain that is not running and waits until libvirt says it runs.
func (p *Provider) ensureRunning(ctx context.Context, c conn, dom golibvirt.Domain, log *slog.Logger) error {
	state, err := c.DomainState(ctx, dom)
	if err != nil {
		return err
	}
	switch state {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked:
		return nil
	case golibvirt.DomainPaused, golibvirt.DomainPmsuspended:
		return fmt.Errorf("%w: domain %s is %s; egressd does not resume guests: resume or destroy it on the host", errPaused, dom.Name, stateWord(state))
	case golibvirt.DomainNostate:
		// Starting already.
	default:
		// Already running (a racing start) is fine.
		if err := c.StartDomain(ctx, dom); err != nil && !isCode(err, golibvirt.ErrOperationInvalid) {
			return err
		}
		log.Info("libvirt domain started")
	}
	return p.waitRunning(ctx, c, dom)
}

// runningPoll is how often waitRunning asks.
const runningPoll = 500 * time.Millisecond

func (p *Provider) waitRunning(ctx context.Context, c conn, dom golibvirt.Domain) error {
	deadline := time.Now().Add(p.cfg.running)
	t := time.NewTicker(runningPoll)
	defer t.Stop()
	for {
		state, err := c.DomainState(ctx, dom)
		switch {
		case err != nil:
			return err
		case state == golibvirt.DomainRunning || state == golibvirt.DomainBlocked:
			return nil
		case state != golibvirt.DomainNostate:
			return fmt.Errorf("%w: domain %s went %s right after it was started (see %s/%s.log on the host)", errNotStarted, dom.Name, stateWord(state), serialLogDir, dom.Name)
		case !time.Now().Before(deadline):
			return fmt.Errorf("%w: domain %s did not reach running within %s", errNotStarted, dom.Name, p.cfg.running)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// randomMAC is a random address in QEMU's 52:54:00 range. It is random per domain (and kept
// in its marks), so that a DHCP lease a deleted predecessor left behind never matches.
func randomMAC() string {
	b := make([]byte, 3)
	rand.Read(b)
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[0], b[1], b[2])
}

// Volume names of an instance.
func overlayVolume(name string) string { return name + ".qcow2" }
func seedVolume(name string) string    { return name + "-seed.iso" }

// discard deletes a volume if it is there.
func discard(ctx context.Context, c conn, pool golibvirt.StoragePool, name string) error {
	vol, err := c.LookupVolume(ctx, pool, name)
	if isCode(err, golibvirt.ErrNoStorageVol) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.DeleteVolume(ctx, vol); err != nil && !isCode(err, golibvirt.ErrNoStorageVol) {
		return err
	}
	return nil
}

func gib(b uint64) string { return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30)) }
