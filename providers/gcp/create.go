package gcp

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers"
)

// plan is a request checked and resolved against the config, before any call.
type plan struct {
	req     providers.CreateRequest
	id      string
	zone    string
	image   string
	machine MachineType
}

// Create makes sure the instance named req.Name exists in the chosen zone and returns it,
// usually Provisioning (an insert is asynchronous; Get follows it):
//
//  1. the request and its placement are checked (Permanent, naming the field);
//  2. the firewall rule for the network and port is made if missing (firewall.manage);
//  3. the instance is inserted with its marks, user-data and proxy document, with a
//     requestId derived from the request and its attempt: the same attempt, retried after a
//     crash or a lost answer, gets the first insert's operation back and makes nothing new;
//  4. an insert whose operation already failed (that same attempt's) returns its error;
//  5. 409, the name taken: the instance is adopted if its marks are this request's, and
//     refused (Permanent) otherwise.
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
	if !resourceName.MatchString(req.Name) {
		bad("name %q is not an RFC 1035 label", req.Name)
	}
	if !labelValue.MatchString(req.UID) {
		bad("uid %q must be 1 to 63 lowercase letters, digits, '_' or '-' (it is a label value)", req.UID)
	}
	if !labelValue.MatchString(req.Installation) {
		bad("installation %q must be 1 to 63 lowercase letters, digits, '_' or '-' (it is a label value)", req.Installation)
	}
	if req.Port < 1 || req.Port > 65535 {
		bad("port must be between 1 and 65535, got %d", req.Port)
	}
	if len(req.UserData) > maxUserData {
		bad("user-data is %d bytes; a metadata value holds at most %d", len(req.UserData), maxUserData)
	}
	if req.Auth.Lease() {
		if _, err := leaseauth.ParseKeyLines(req.Auth.LeaseKey.Reveal()); err != nil {
			bad("auth.leaseKey: %v", err)
		}
	}
	if req.Auth != nil && !req.Auth.Lease() && (req.Auth.Username == "" || strings.ContainsAny(req.Auth.Username, ":\r\n")) {
		bad("auth.username must be non-empty and hold no ':' or line break")
	}
	pl := plan{req: req}
	zone := req.Placement.Zone
	host, field := req.Host, "host"
	if host == "" {
		host, field = zone, "placement.zone"
	}
	switch {
	case host == "" && len(p.cfg.Zones) == 1:
		host = p.cfg.Zones[0].Name
	case host == "":
		bad("placement.zone is required when zones lists more than one zone (%s)", strings.Join(p.zoneNames(), ", "))
	case zone != "" && zone != host:
		bad("placement.zone %q differs from the zone %q chosen for it", zone, host)
	case !p.hasZone(host):
		bad("%s %q is not in zones (%s)", field, host, strings.Join(p.zoneNames(), ", "))
	}
	pl.zone = host
	imgKey, ok := providers.PickKey(req.Placement.Image, p.cfg.Images)
	if !ok {
		bad("placement.image %q is not a key of images (%s)", req.Placement.Image, strings.Join(slices.Sorted(maps.Keys(p.cfg.Images)), ", "))
	}
	pl.image = p.cfg.Images[imgKey]
	mtKey, ok := providers.PickKey(req.Placement.MachineType, p.cfg.MachineTypes)
	if !ok {
		bad("placement.machineType %q is not a key of machineTypes (%s)", req.Placement.MachineType, strings.Join(slices.Sorted(maps.Keys(p.cfg.MachineTypes)), ", "))
	}
	pl.machine = p.cfg.MachineTypes[mtKey]
	if len(errs) > 0 {
		return plan{}, errors.Join(errs...)
	}
	pl.id = idOf(pl.zone, req.Name)
	return pl, nil
}

// requestID is the insert's requestId: a UUID (version 8, from SHA-256) of the installation,
// UID, name and attempt. Every retry of one attempt sends the same one, so the service
// answers it with the first insert's operation
// (https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert, requestId);
// the next attempt sends another, so an insert that failed is really tried again.
func requestID(req providers.CreateRequest, prev string) string {
	sum := sha256.Sum256([]byte("egressd/gcp/insert\x00" + req.Installation + "\x00" + req.UID + "\x00" + req.Name + "\x00" + req.Attempt + "\x00" + prev))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (p *Provider) create(ctx context.Context, pl plan) (providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return providers.Instance{}, err
	}
	name := pl.req.Name
	log := p.log.With("zone", pl.zone, "name", name)
	log.Debug("gcp create resolved", "machineType", pl.machine.Type, "image", pl.image, "userDataBytes", len(pl.req.UserData))
	unlock, err := p.lockName(ctx, pl.zone, name)
	if err != nil {
		return providers.Instance{}, err
	}
	defer unlock()
	c, release, err := p.clients.get(ctx)
	if err != nil {
		return providers.Instance{}, err
	}
	defer release()

	rule := ""
	if p.cfg.manageFirewall {
		key := p.ruleName(pl.req.Installation, pl.req.Port)
		unlockRule, err := p.firewalls.Lock(ctx, key)
		if err != nil {
			return providers.Instance{}, fmt.Errorf("%w: firewall rule %s: %w", errBusy, key, err)
		}
		rule, err = p.ensureFirewall(ctx, c, pl.req.Installation, pl.req.Port)
		if err != nil {
			unlockRule()
			return providers.Instance{}, err
		}
		// Until this Create is done its VM may not be listed yet, so a Delete in this
		// process must not collect the rule meanwhile; other Creates go on.
		defer p.ruleUsers.hold(rule)()
		unlockRule()
	}
	resource, err := p.resource(pl, rule)
	if err != nil {
		return providers.Instance{}, err
	}
	prev := ""
	for range maxReinserts {
		op, err := p.insert(ctx, c, pl, resource, requestID(pl.req, prev))
		switch {
		case isCode(err, http.StatusConflict):
			log.Debug("gcp instance name taken; adopting")
			return p.adopt(ctx, c, pl)
		case err != nil:
			return providers.Instance{}, err
		}
		inst, err := p.awaitInsert(ctx, c, pl, op)
		if err != nil || inst.ID != "" {
			return inst, err
		}
		// The insert this requestId names succeeded once, and its instance has been deleted
		// since: insert again, under a requestId that follows from that one, so that a retry
		// of this call takes the same path.
		prev = op.GetName()
	}
	return providers.Instance{}, fmt.Errorf("%w: %s in zone %s was deleted after each of %d inserts", errInserting, name, pl.zone, maxReinserts)
}

// maxReinserts bounds the inserts of one Create whose instances are deleted as they appear.
const maxReinserts = 16

func (p *Provider) insert(ctx context.Context, c *clients, pl plan, resource *computepb.Instance, rid string) (*computepb.Operation, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	op, err := c.inst.Insert(cctx, &computepb.InsertInstanceRequest{
		Project: p.cfg.Project, Zone: pl.zone, InstanceResource: resource, RequestId: proto.String(rid),
	})
	if err != nil {
		return nil, err
	}
	p.log.Info("gcp instance inserted", "zone", pl.zone, "name", pl.req.Name, "operation", op.Name(), "status", op.Proto().GetStatus().String())
	return op.Proto(), nil
}

// awaitInsert waits, within the call budget, until the inserted instance is visible, and
// returns it. An insert that failed (now, or earlier for this requestId) returns its error; an
// insert still pending at the budget's end returns the instance Provisioning, which Get
// follows; one that succeeded with its instance gone since returns a zero Instance.
func (p *Provider) awaitInsert(ctx context.Context, c *clients, pl plan, op *computepb.Operation) (providers.Instance, error) {
	deadline := time.Now().Add(p.cfg.call)
	for {
		if oe := operationError(op); oe != nil {
			return providers.Instance{}, oe
		}
		inst, err := p.read(ctx, c, pl.zone, pl.req.Name)
		switch {
		case err == nil:
			return p.describe(pl.id, inst), nil
		case !isCode(err, http.StatusNotFound):
			return providers.Instance{}, err
		case op.GetStatus() == computepb.Operation_DONE:
			// Read again: DONE without an error and no instance means it was deleted since.
			if op, err = p.operation(ctx, c, pl.zone, op.GetName()); err != nil {
				return providers.Instance{}, err
			}
			if operationError(op) == nil {
				return providers.Instance{}, nil
			}
			continue
		case !time.Now().Before(deadline):
			return providers.Instance{ID: pl.id, Name: pl.req.Name, Host: pl.zone, State: providers.StateProvisioning, Port: pl.req.Port}, nil
		}
		select {
		case <-ctx.Done():
			return providers.Instance{}, ctx.Err()
		case <-time.After(pendingPoll):
		}
		if op, err = p.operation(ctx, c, pl.zone, op.GetName()); err != nil {
			return providers.Instance{}, err
		}
	}
}

// operation reads a zone operation. One that is gone (deleted, aged out) while an insert is
// followed is Transient: the next Create or Get finds the instance or its newest insert.
func (p *Provider) operation(ctx context.Context, c *clients, zone, name string) (*computepb.Operation, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	op, err := c.zops.Get(cctx, &computepb.GetZoneOperationRequest{Project: p.cfg.Project, Zone: zone, Operation: name})
	if isCode(err, http.StatusNotFound) {
		return nil, fmt.Errorf("%w: operation %s is gone: %w", errInserting, name, err)
	}
	return op, err
}

// adopt returns the instance that holds the name, if its marks are this request's.
func (p *Provider) adopt(ctx context.Context, c *clients, pl plan) (providers.Instance, error) {
	inst, err := p.read(ctx, c, pl.zone, pl.req.Name)
	if isCode(err, http.StatusNotFound) {
		return providers.Instance{}, fmt.Errorf("%w: %s in zone %s is taken but not visible yet", errInserting, pl.req.Name, pl.zone)
	}
	if err != nil {
		return providers.Instance{}, err
	}
	m := marksOf(inst.GetLabels())
	switch {
	case !m.Managed:
		return providers.Instance{}, fmt.Errorf("%w: instance %s in zone %s carries no egressd mark; it was not created by egressd", errForeign, pl.req.Name, pl.zone)
	case m.UID != pl.req.UID || m.Installation != pl.req.Installation:
		return providers.Instance{}, fmt.Errorf("%w: instance %s in zone %s belongs to uid %q of installation %q, not uid %q of installation %q",
			errForeign, pl.req.Name, pl.zone, m.UID, m.Installation, pl.req.UID, pl.req.Installation)
	}
	return p.describe(pl.id, inst), nil
}

// resource is the insert's body (https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert).
func (p *Provider) resource(pl plan, rule string) (*computepb.Instance, error) {
	md, err := metadata(pl.req)
	if err != nil {
		return nil, err
	}
	nic := &computepb.NetworkInterface{Network: proto.String(p.networkURL())}
	if p.cfg.Subnetwork != "" {
		nic.Subnetwork = proto.String(p.cfg.Subnetwork)
	}
	if p.cfg.ExternalIP == ExternalIPEphemeral {
		nic.AccessConfigs = []*computepb.AccessConfig{{Name: proto.String("External NAT"), Type: proto.String("ONE_TO_ONE_NAT")}}
	}
	tags := append([]string(nil), p.cfg.NetworkTags...)
	if rule != "" {
		tags = append(tags, rule)
	}
	inst := &computepb.Instance{
		Name:        proto.String(pl.req.Name),
		Description: proto.String(truncate("egressd proxy "+pl.req.Proxy, 2048)),
		MachineType: proto.String("zones/" + pl.zone + "/machineTypes/" + pl.machine.Type),
		Labels:      p.labels(pl.req, rule),
		Disks: []*computepb.AttachedDisk{{
			Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String(pl.image), DiskSizeGb: proto.Int64(int64(p.cfg.DiskSizeGb)),
			},
		}},
		NetworkInterfaces: []*computepb.NetworkInterface{nic},
		Metadata:          md,
	}
	if len(tags) > 0 {
		inst.Tags = &computepb.Tags{Items: tags}
	}
	if p.cfg.ServiceAccount != "" {
		inst.ServiceAccounts = []*computepb.ServiceAccount{{Email: proto.String(p.cfg.ServiceAccount),
			Scopes: []string{"https://www.googleapis.com/auth/cloud-platform"}}}
	}
	if p.cfg.Spot != nil {
		inst.Scheduling = &computepb.Scheduling{
			ProvisioningModel:         proto.String("SPOT"),
			InstanceTerminationAction: proto.String(p.cfg.termination),
			AutomaticRestart:          proto.Bool(false),
			OnHostMaintenance:         proto.String("TERMINATE"),
		}
	}
	return inst, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
