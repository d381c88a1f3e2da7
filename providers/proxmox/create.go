package proxmox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/nocloud"
)

// plan is a request checked and resolved against the config, before any request.
type plan struct {
	req     providers.CreateRequest
	node    string
	tmplKey string
	tmpl    TemplateConfig
	machine MachineType
}

// Create makes sure the VM named req.Name exists on the chosen node and is started, and
// returns it (usually Provisioning: the guest agent has no address yet). Every step is
// idempotent, and a later Create picks up after a kill at any of them:
//
//  1. the request and its placement are checked (Permanent, naming the field);
//  2. a VM of that name is adopted if its marks say it is this proxy's (waiting while it is
//     locked), refused (Permanent) otherwise;
//  3. otherwise a VMID is derived from the name and verified by the clone itself (F4): a
//     taken VMID is inspected, locked → wait, ours → adopt (a clone whose caller was killed
//     has no name in the resources yet, F8), foreign → the next VMID;
//  4. the clone writes the marks into the description in the call that creates the VM;
//  5. a VM that is not running gets its seed ISO (re-uploaded: an upload overwrites, F12),
//     its config, its disk size, and is started.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	pl, err := p.plan(req)
	if err != nil {
		return providers.Instance{}, p.classify(opCreate, req.Name, err)
	}
	unlock, err := p.lockName(ctx, req.Name)
	if err != nil {
		return providers.Instance{}, p.classify(opCreate, req.Name, err)
	}
	defer unlock()
	inst, err := p.create(ctx, pl)
	return inst, p.classify(opCreate, req.Name, err)
}

func (p *Provider) plan(req providers.CreateRequest) (plan, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...)))
	}
	for _, err := range nocloud.CheckRequest(req) {
		bad("%v", err)
	}
	// Both go into the description, one line each.
	if req.UID == "" || oneLine(req.UID) != req.UID {
		bad("uid is required, on one line")
	}
	if req.Installation == "" || oneLine(req.Installation) != req.Installation {
		bad("installation is required, on one line")
	}
	pl := plan{req: req}
	node, field := req.Host, "host"
	if node == "" {
		node, field = req.Placement.Zone, "placement.zone"
	}
	switch {
	case node == "" && len(p.cfg.Nodes) == 1:
		node = p.cfg.Nodes[0].Name
	case node == "":
		bad("placement.zone is required when nodes lists more than one node (%s)", strings.Join(p.nodeNames(), ", "))
	case req.Placement.Zone != "" && req.Placement.Zone != node:
		bad("placement.zone %q differs from the node %q chosen for it", req.Placement.Zone, node)
	case p.cfg.maxOps[node] == 0:
		bad("%s %q is not in nodes (%s)", field, node, strings.Join(p.nodeNames(), ", "))
	}
	pl.node = node
	var ok bool
	if pl.tmplKey, ok = providers.PickKey(req.Placement.Image, p.cfg.Templates); !ok {
		bad("placement.image %q is not a key of templates (%s)", req.Placement.Image, strings.Join(slices.Sorted(maps.Keys(p.cfg.Templates)), ", "))
	}
	pl.tmpl = p.cfg.Templates[pl.tmplKey]
	mtKey, ok := providers.PickKey(req.Placement.MachineType, p.cfg.MachineTypes)
	if !ok {
		bad("placement.machineType %q is not a key of machineTypes (%s)", req.Placement.MachineType, strings.Join(slices.Sorted(maps.Keys(p.cfg.MachineTypes)), ", "))
	}
	pl.machine = p.cfg.MachineTypes[mtKey]
	return pl, errors.Join(errs...)
}

func (p *Provider) nodeNames() []string {
	names := make([]string, 0, len(p.cfg.Nodes))
	for _, n := range p.cfg.Nodes {
		names = append(names, n.Name)
	}
	return names
}

// target is the VM a Create works on.
type target struct {
	vmid int
	node string
}

func (p *Provider) create(ctx context.Context, pl plan) (providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return providers.Instance{}, err
	}
	log := p.log.With("name", pl.req.Name, "node", pl.node)
	log.Debug("proxmox create resolved", "template", pl.tmplKey, "cores", pl.machine.Cores,
		"memoryMiB", pl.machine.MemoryMiB, "port", pl.req.Port, "userDataBytes", len(pl.req.UserData))
	t, err := p.findOrClone(ctx, pl, log)
	if err != nil {
		return providers.Instance{}, err
	}
	st, err := p.api.status(ctx, t.node, t.vmid)
	if err != nil {
		return providers.Instance{}, err
	}
	if st.Status != "running" {
		// Started VMs are complete: the seed and config come before the start.
		if err := p.prepare(ctx, pl, t, log); err != nil {
			return providers.Instance{}, err
		}
		if err := p.start(ctx, t); err != nil {
			return providers.Instance{}, err
		}
	}
	return p.get(ctx, t.vmid, pl.req.Name)
}

// VMID allocation: a hash of the name (itself a hash of installation and UID) into the range,
// probing forward past VMIDs that are demonstrably someone else's.
const (
	maxProbes   = 32
	maxInspects = 8 // per VMID: lock waits, lock-timeout retries, races with another cloner
)

func (p *Provider) firstVMID(name string) int {
	h := fnv.New64a()
	h.Write([]byte(name))
	span := uint64(p.cfg.vmidMax - p.cfg.vmidMin + 1)
	return int(h.Sum64() % span)
}

func (p *Provider) vmidAt(first, i int) int {
	span := p.cfg.vmidMax - p.cfg.vmidMin + 1
	return p.cfg.vmidMin + (first+i)%span
}

// verdicts of inspect.
type verdict int

const (
	vFree    verdict = iota // no VM at that VMID (any more)
	vOurs                   // this proxy's VM: adopt it
	vForeign                // someone else's: probe forward
)

func (p *Provider) findOrClone(ctx context.Context, pl plan, log *slog.Logger) (target, error) {
	res, err := p.api.resources(ctx)
	if err != nil {
		return target{}, err
	}
	var named []resource
	for _, r := range res {
		if r.Type == "qemu" && r.Name == pl.req.Name {
			named = append(named, r)
		}
	}
	switch len(named) {
	case 0:
	case 1:
		return p.adopt(ctx, pl, named[0], log)
	default:
		return target{}, fmt.Errorf("%w %s: VMIDs %d (node %s) and %d (node %s); delete one by hand",
			errTwins, pl.req.Name, named[0].VMID, named[0].Node, named[1].VMID, named[1].Node)
	}
	tmpl, ok := findVMID(res, pl.tmpl.VMID)
	if !ok {
		return target{}, fmt.Errorf("%w: templates.%s (VMID %d) is not in the cluster", errNoTemplate, pl.tmplKey, pl.tmpl.VMID)
	}
	first := p.firstVMID(pl.req.Name)
	for i := range maxProbes {
		vmid := p.vmidAt(first, i)
		v, node, err := p.claim(ctx, pl, tmpl, vmid, res, log)
		if err != nil {
			return target{}, err
		}
		switch v {
		case vOurs:
			return target{vmid: vmid, node: node}, nil
		case vForeign:
			log.Debug("proxmox VMID taken by another VM, probing on", "vmid", vmid)
		}
	}
	return target{}, fmt.Errorf("%w: %d VMIDs from %d in vmidRange %d–%d are taken", errVMIDsExhausted, maxProbes,
		p.vmidAt(first, 0), p.cfg.vmidMin, p.cfg.vmidMax)
}

// claim makes vmid ours, or says it is someone else's: a clone onto a free VMID, or an
// inspection of a taken one. The clone is the verification: PVE refuses a taken VMID at once
// (F4), so two cloners racing for one VMID never both win.
func (p *Provider) claim(ctx context.Context, pl plan, tmpl resource, vmid int, res []resource, log *slog.Logger) (verdict, string, error) {
	for attempt := range maxInspects {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return 0, "", err
			}
			var err error
			if res, err = p.api.resources(ctx); err != nil {
				return 0, "", err
			}
		}
		if r, taken := findVMID(res, vmid); taken {
			v, node, err := p.inspect(ctx, pl, r, log)
			if err != nil || v != vFree {
				return v, node, err
			}
		}
		err := p.cloneTo(ctx, pl, tmpl, vmid, log)
		switch {
		case err == nil:
			return vOurs, pl.node, nil
		case isTaken(err):
			log.Debug("proxmox clone found the VMID taken; inspecting it", "vmid", vmid)
		case isLockContention(err):
			log.Debug("proxmox clone met a lock; retrying", "vmid", vmid, "error", err.Error())
		default:
			return 0, "", err
		}
	}
	return 0, "", fmt.Errorf("%w: VMID %d: still contended after %d attempts", errLocked, vmid, maxInspects)
}

// inspect decides about a VM at a VMID we want: locked → wait for the lock to go (it may be
// our own clone, cut off by a kill, still running: its entry has no name yet, F8); then our
// marks → ours, other marks or none → foreign. Anything unreadable is an error, never
// "foreign": probing forward on a guess clones a duplicate.
func (p *Provider) inspect(ctx context.Context, pl plan, r resource, log *slog.Logger) (verdict, string, error) {
	if r.Lock != "" {
		log.Debug("proxmox VMID is locked; waiting", "vmid", r.VMID, "lock", r.Lock)
		var gone bool
		var err error
		if r, gone, err = p.waitUnlocked(ctx, r.VMID); err != nil || gone {
			return vFree, "", err
		}
	}
	cfg, err := p.api.config(ctx, r.Node, r.VMID)
	if isGone(err) {
		return vFree, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	m, found := parseMarks(cfg["description"])
	if found && m.UID == pl.req.UID && m.Installation == pl.req.Installation {
		log.Debug("proxmox adopting the VM at our VMID", "vmid", r.VMID)
		return vOurs, r.Node, nil
	}
	return vForeign, "", nil
}

// adopt takes over the VM of that name, if it is this proxy's.
func (p *Provider) adopt(ctx context.Context, pl plan, r resource, log *slog.Logger) (target, error) {
	if r.Lock != "" {
		var gone bool
		var err error
		if r, gone, err = p.waitUnlocked(ctx, r.VMID); err != nil {
			return target{}, err
		}
		if gone {
			return target{}, fmt.Errorf("%w: VM %d (%s) vanished while it was locked", errGone, r.VMID, pl.req.Name)
		}
	}
	cfg, err := p.api.config(ctx, r.Node, r.VMID)
	if err != nil {
		return target{}, err
	}
	m, found := parseMarks(cfg["description"])
	switch {
	case !found:
		return target{}, fmt.Errorf("%w: VM %d on %s is named %s but carries no egressd marks", errNotOurs, r.VMID, r.Node, pl.req.Name)
	case m.UID != pl.req.UID || m.Installation != pl.req.Installation:
		return target{}, fmt.Errorf("%w: VM %d on %s named %s is marked for uid %q of installation %q",
			errForeign, r.VMID, r.Node, pl.req.Name, m.UID, m.Installation)
	}
	log.Debug("proxmox adopting the VM of that name", "vmid", r.VMID, "status", r.Status)
	return target{vmid: r.VMID, node: r.Node}, nil
}

// waitUnlocked polls the resources until the VM holds no lock (a clone takes ~2 s, F16; a
// lock that never clears needs `qm unlock`, and Create fails Transient after cloneBudget).
func (p *Provider) waitUnlocked(ctx context.Context, vmid int) (resource, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, cloneBudget)
	defer cancel()
	for d := pollFirst; ; d = min(2*d, pollMax) {
		if err := sleep(ctx, d); err != nil {
			return resource{}, false, fmt.Errorf("%w: VM %d: %w", errLocked, vmid, err)
		}
		res, err := p.api.resources(ctx)
		if err != nil {
			return resource{}, false, err
		}
		r, ok := findVMID(res, vmid)
		if !ok {
			return resource{}, true, nil
		}
		if r.Lock == "" {
			return r, false, nil
		}
	}
}

// cloneTo clones the template to vmid, holding a clone slot of the target node and storage
// for the clone and its task.
func (p *Provider) cloneTo(ctx context.Context, pl plan, tmpl resource, vmid int, log *slog.Logger) error {
	linked := !pl.tmpl.FullClone && tmpl.Template == 1 && tmpl.Node == pl.node && p.cfg.Storage == ""
	storage := p.cfg.Storage
	if storage == "" {
		storage = "template-" + strconv.Itoa(tmpl.VMID)
	}
	release, err := p.clone.acquire(ctx, pl.node+"/"+storage, p.cfg.maxOps[pl.node])
	if err != nil {
		return fmt.Errorf("%w: waiting for a clone slot on %s: %w", errBusy, pl.node, err)
	}
	defer release()
	// In whole seconds, as the description holds them, so the lifetime reads back exact.
	now := p.now().UTC().Truncate(time.Second)
	m := marks{Managed: true, UID: pl.req.UID, Installation: pl.req.Installation, CreatedAt: now,
		ExpiresAt: providers.ExpiryOf(now, pl.req.Lifetime), Provider: p.name, Port: pl.req.Port, Proxy: pl.req.Proxy}
	form := url.Values{
		"newid":       {strconv.Itoa(vmid)},
		"name":        {pl.req.Name},
		"description": {m.description()},
		"full":        {"1"},
	}
	if linked {
		form.Set("full", "0")
	}
	if tmpl.Node != pl.node {
		form.Set("target", pl.node)
	}
	if !linked && p.cfg.Storage != "" {
		form.Set("storage", p.cfg.Storage)
	}
	log.Debug("proxmox cloning", "vmid", vmid, "template", tmpl.VMID, "linked", linked)
	upid, err := p.api.clone(ctx, tmpl.Node, tmpl.VMID, form)
	if err != nil {
		return err
	}
	return p.api.wait(ctx, upid, cloneBudget)
}

// prepare gives a stopped VM of ours its seed, config and disk size. Each step may be
// repeated: an upload overwrites (F12), a config PUT sets the same values, a resize to the
// same size is skipped.
func (p *Provider) prepare(ctx context.Context, pl plan, t target, log *slog.Logger) error {
	iso, err := nocloud.Build(nocloud.Spec{
		Name: pl.req.Name, UserData: pl.req.UserData, VendorData: p.cfg.VendorData,
		Agent: p.cfg.installAgent, Port: pl.req.Port, Auth: pl.req.Auth,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errLocal, err)
	}
	upid, err := p.api.upload(ctx, t.node, p.cfg.ISOStorage, seedFile(pl.req.Name), iso, uploadBudget)
	if err != nil {
		return err
	}
	if err := p.api.wait(ctx, upid, uploadBudget); err != nil {
		return err
	}
	cfg, err := p.api.config(ctx, t.node, t.vmid)
	if err != nil {
		return err
	}
	form := url.Values{
		"cores":  {strconv.Itoa(pl.machine.Cores)},
		"memory": {strconv.Itoa(pl.machine.MemoryMiB)},
		"agent":  {"1"},
		"tags":   {tag},
		"ide2":   {p.seedVolume(pl.req.Name) + ",media=cdrom"},
	}
	if p.cfg.Bridge != "" || p.cfg.VLANTag != 0 {
		net0, err := rewriteNet(cfg["net0"], p.cfg.Bridge, p.cfg.VLANTag)
		if err != nil {
			return err
		}
		form.Set("net0", net0)
	}
	if err := p.retryLocked(ctx, func() error { return p.api.setConfig(ctx, t.node, t.vmid, form) }); err != nil {
		return err
	}
	if pl.machine.DiskGiB > 0 {
		disk, err := bootDisk(cfg)
		if err != nil {
			return err
		}
		if size := diskGiB(cfg[disk]); size < pl.machine.DiskGiB {
			log.Debug("proxmox growing the boot disk", "vmid", t.vmid, "disk", disk, "fromGiB", size, "toGiB", pl.machine.DiskGiB)
			upid, err := p.api.resize(ctx, t.node, t.vmid, disk, pl.machine.DiskGiB)
			if err != nil {
				return err
			}
			if err := p.api.wait(ctx, upid, resizeBudget); err != nil {
				return err
			}
		}
	}
	return nil
}

// start starts the VM (a start behind a lock is accepted and queues, F3) and waits until PVE
// says it runs.
func (p *Provider) start(ctx context.Context, t target) error {
	var upid string
	err := p.retryLocked(ctx, func() (err error) {
		upid, err = p.api.power(ctx, t.node, t.vmid, "start")
		if err == nil {
			err = p.api.wait(ctx, upid, powerBudget)
		}
		return err
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, runningBudget)
	defer cancel()
	for d := pollFirst; ; d = min(2*d, pollMax) {
		st, err := p.api.status(ctx, t.node, t.vmid)
		if err == nil && st.Status == "running" {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
		if err := sleep(ctx, d); err != nil {
			return fmt.Errorf("%w: VM %d is not running %s after its start: %w", errNotStarted, t.vmid, runningBudget, err)
		}
	}
}

// retryLocked repeats a step while PVE says a lock is held (F7, lock timeouts), a few times
// with back-off; then the error stands (Transient) and the reconciler retries later.
func (p *Provider) retryLocked(ctx context.Context, step func() error) error {
	var err error
	for attempt := range maxInspects {
		if attempt > 0 {
			if serr := sleep(ctx, backoff(attempt)); serr != nil {
				return errors.Join(err, serr)
			}
		}
		if err = step(); err == nil || !isLockContention(err) {
			return err
		}
	}
	return err
}

// backoff is 250 ms, 500 ms, 1 s, … capped at 4 s.
func backoff(attempt int) time.Duration {
	return min(250*time.Millisecond<<(attempt-1), 4*time.Second)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func findVMID(res []resource, vmid int) (resource, bool) {
	for _, r := range res {
		if r.VMID == vmid {
			return r, true
		}
	}
	return resource{}, false
}

// seedFile is the seed ISO's file name; PVE wants the .iso suffix (F12).
func seedFile(name string) string { return name + "-seed.iso" }

// seedVolume is the seed's volume ID, as ide2 and the content DELETE name it.
func (p *Provider) seedVolume(name string) string {
	return p.cfg.ISOStorage + ":iso/" + seedFile(name)
}
