package reconciler

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/schemas"
)

// Input is everything Decide looks at for one proxy.
type Input struct {
	Name         string
	Spec         *schemas.ProxySpec // nil when the key is absent: the proxy is being deleted
	SpecErr      error              // the spec or the name is invalid
	SpecRevision uint64
	UserData     []byte // resolved user-data
	UserDataErr  error  // the referenced cloud_init document is missing
	Status       *events.ProxyStatus
	Health       *events.ProxyHealth // the probers' verdict, nil when unknown
	Catalog      map[string]ProviderInfo
	// Targets are the latest checks of the spec's provider's targets, by target (host) name;
	// a target without one is taken as healthy.
	Targets map[string]TargetCheck
	// CreateAt is when the provider's create-rate limit lets the next create go; zero: now.
	CreateAt time.Time
	// Limit is the provider's instance limits and how full it is (nil: no limits).
	Limit *InstanceLimit
	// Suspect is the group (provider target or pool) whose brake holds the proxy's
	// replacement for health, if any (brake.go).
	Suspect *events.Suspect
	// Rollout is the rollout budget of the proxy's provider (a proxy of its own).
	Rollout RolloutBudget
	// BrakeReleasedAt is when the brake last let go of the proxy's groups: an Unhealthy
	// proxy is replaced only ReplaceUnhealthyAfter past it, so the fleet an outage left
	// Unhealthy recovers before anything is replaced.
	BrakeReleasedAt time.Time
	Installation    string
	Result          *events.OpResult // an op result to fold in first, if any
	Now             time.Time
	NewID           func() string // fresh random IDs for UIDs and ops
}

// TargetCheck is the latest check of one provider target (provider_health).
type TargetCheck struct {
	Ready     bool
	Reason    string
	Message   string
	CheckedAt time.Time
}

// ProviderInfo is what the reconciler knows of a provider from its catalog. It is
// schemas.CatalogEntry, so that the rules of what is refused (schemas.Catalog) are the ones
// the pool controller and `egressd validate` apply too.
type ProviderInfo = schemas.CatalogEntry

// Decision is what to do: write Status (or remove it when nil), publish Ops and Events, and
// decide again by Wake at the latest.
type Decision struct {
	Status *events.ProxyStatus
	Ops    []events.Op
	Events []events.Event
	Wake   time.Time
}

// Decide is the whole lifecycle policy of a proxy (DESIGN §5.1). It is pure: the same input
// gives the same decision, and it does no I/O.
func Decide(p Policy, in Input) Decision {
	d := &decider{p: p, in: in, now: in.Now}
	if in.Status != nil {
		st := cloneStatus(*in.Status)
		d.st = &st
	}
	if in.Result != nil && d.st != nil && d.st.Op != nil && d.st.Op.ID == in.Result.OpID {
		d.fold(in.Result)
	}
	d.decide()
	return d.finish()
}

type decider struct {
	p      Policy
	in     Input
	now    time.Time
	st     *events.ProxyStatus // nil until there is something to record
	ops    []events.Op
	wake   time.Time
	remove bool
	bad    bool // the spec cannot be acted on
}

func (d *decider) decide() {
	in := d.in
	switch {
	case in.Spec == nil && in.SpecErr == nil:
		d.deleteProxy()
	case in.SpecErr != nil:
		d.invalid(events.ReasonInvalidSpec, in.SpecErr.Error())
	case in.Spec.Mode == schemas.ModeExternal:
		d.external()
	default:
		d.managed()
	}
}

// mayExist says whether an instance may exist: one was reported, or a create was issued and
// no delete has confirmed it gone since.
func (d *decider) mayExist() bool {
	return d.st != nil && d.st.MayExist()
}

func (d *decider) ensureStatus() {
	if d.st == nil {
		d.st = &events.ProxyStatus{V: 1, Phase: events.PhasePending, CreatedAt: d.now}
	}
}

func (d *decider) deleteProxy() {
	if d.st == nil {
		return
	}
	if !d.mayExist() && d.st.Op == nil && !d.hasExtras() {
		d.remove = true
		return
	}
	if d.st.Teardown != events.ReasonProxyDeleted && d.st.Op == nil {
		// The back-off in force was earned by the op that failed (a create on a full quota
		// waits five minutes); a delete is another op, idempotent, and the user asked for it.
		d.st.RetryAt, d.st.Failures = time.Time{}, 0
	}
	d.st.Teardown = events.ReasonProxyDeleted
	if d.st.LastError == nil {
		d.st.Reason, d.st.Message = events.ReasonProxyDeleted, "the proxy was deleted; deleting its instance"
	}
	d.teardown()
}

// teardown deletes the current instance, one op at a time, until a delete confirms it gone.
func (d *decider) teardown() {
	if d.waitForOp() || d.waitForRetry() {
		return
	}
	d.deleteInstance()
}

// deleteInstance issues a delete of the instance that may exist, unless its provider is no
// longer configured: then nobody could run the op, and the instance is left alone, the status
// saying so, until the provider is configured again.
func (d *decider) deleteInstance() {
	if msg, gone := d.unmanaged(); gone {
		d.st.Reason, d.st.Message = events.ReasonProviderRemoved, msg
		return
	}
	if d.deleteExtra() {
		return
	}
	d.issue(events.OpDelete)
}

// unmanaged reports whether an instance may exist on a provider the catalog no longer has
// (removed from the config: `egressd setup` or the all-in-one pruned its record), and the
// message that says it is left alone.
func (d *decider) unmanaged() (string, bool) {
	st := d.st
	if st == nil || !d.mayExist() && !d.hasExtras() || st.Provider == "" || st.Mode == schemas.ModeExternal {
		return "", false
	}
	if _, ok := d.in.Catalog[st.Provider]; ok {
		return "", false
	}
	at := ""
	if a := st.Address(); a != "" {
		at = " at " + a
	}
	return fmt.Sprintf("provider: %q is no longer configured (known: %s); its instance %s%s is left alone, unmanaged",
		st.Provider, knownProviders(d.in.Catalog), st.InstanceName, at), true
}

func (d *decider) invalid(reason events.Reason, msg string) {
	d.ensureStatus()
	d.st.Reason, d.st.Message = reason, msg
	d.st.SpecRevision = d.in.SpecRevision
	d.bad = true
	// An op already in flight still has its result folded; nothing new is started.
	d.waitForOp()
}

func (d *decider) external() {
	d.ensureStatus()
	if d.st.Mode == schemas.ModeManaged && (d.mayExist() || d.st.Op != nil || d.hasExtras()) {
		d.st.Teardown = events.ReasonModeChanged
		d.teardown()
		return
	}
	ep := d.in.Spec.Endpoint
	d.setIdentity()
	d.st.Mode, d.st.Provider, d.st.Host = schemas.ModeExternal, "", ""
	d.setAddress(ep.Host, ep.Port)
	d.st.ExpectedEgress = ep.ExpectedEgress
	d.st.Teardown, d.st.LastError, d.st.Failures = "", nil, 0
	d.st.Reason, d.st.Message = events.ReasonExternalEndpoint, ""
	d.st.SpecRevision = d.in.SpecRevision
}

func (d *decider) managed() {
	spec := d.in.Spec
	prov, ok := d.in.Catalog[spec.Provider]
	if msg, gone := d.unmanaged(); !ok && gone && d.st.Provider == spec.Provider {
		d.invalid(events.ReasonProviderRemoved, msg)
		return
	}
	if !ok {
		d.invalid(events.ReasonUnknownProvider, schemas.Catalog(d.in.Catalog).UnknownProvider("provider", spec.Provider).Error())
		return
	}
	d.ensureStatus()
	d.st.Pool = spec.Pool
	host, err := d.pickHost(prov)
	if err != nil {
		d.invalid(events.ReasonInvalidPlacement, err.Error())
		return
	}
	if d.in.UserDataErr != nil {
		d.st.Reason, d.st.Message = events.ReasonCloudInitNotFound, d.in.UserDataErr.Error()
		d.st.SpecRevision = d.in.SpecRevision
		d.waitForOp()
		return
	}
	if d.st.Phase == events.PhaseFailed {
		if d.st.SpecRevision == d.in.SpecRevision {
			return // latched until the spec changes
		}
		d.st.Phase = events.PhasePending
		d.st.Failures, d.st.Deadlines, d.st.LastError, d.st.RetryAt = 0, 0, nil, time.Time{}
		d.st.Reason, d.st.Message = "", ""
	}
	if d.st.Phase == events.PhaseInvalid {
		d.st.Reason, d.st.Message = "", ""
	}
	d.st.SpecRevision = d.in.SpecRevision
	d.st.Mode = schemas.ModeManaged
	d.setIdentity()
	hash, auth := spec.Hash(d.in.UserData), authHash(d.st.UID, spec.Auth)
	if d.st.AuthHash == auth && d.st.InstanceID != "" {
		// The instance carries the spec's credentials: the newest revision that says so is
		// where the leasers and probers read them (decision 87).
		d.st.AuthRevision = d.in.SpecRevision
	}
	d.roll(d.outdated(hash, auth, prov.CredentialsInPlace))

	if d.mayExist() && d.st.Teardown == "" {
		switch {
		case d.st.Provider != spec.Provider:
			d.st.Teardown = events.ReasonProviderChanged
		case d.expired():
			d.st.Teardown = events.ReasonLifetimeExceeded
			d.st.Reason, d.st.Message = events.ReasonLifetimeExceeded, d.lifetimeMessage("deleting it to create a new one")
		}
	}
	if d.waitForOp() || d.waitForRetry() {
		return
	}
	if d.st.Teardown != "" {
		if d.mayExist() || d.st.Teardown == events.ReasonProviderChanged && d.hasExtras() {
			if d.st.LastError == nil && d.st.Reason != d.st.Teardown {
				d.st.Reason, d.st.Message = d.st.Teardown, "deleting the instance to create it again"
			}
			d.deleteInstance()
			return
		}
		d.st.Teardown = ""
	}
	if d.rollStep(hash, auth) {
		return
	}
	d.provision(host, hash, auth)
}

// provision takes the next step of a proxy whose spec its instance may follow: create it,
// deliver new credentials, give up on one that never got an address, or poll it.
func (d *decider) provision(host, hash, auth string) {
	if !d.mayExist() {
		d.st.Provider, d.st.Host = d.in.Spec.Provider, host
	}
	if v, judged := d.verdict(); judged && !v {
		// A proxy the probers find broken is looked at soon, not at the next drift poll:
		// a dead instance is then replaced within seconds.
		if soon := d.now.Add(d.p.ProvisioningPoll); d.st.NextPollAt.After(soon) {
			d.st.NextPollAt = soon
		}
	}
	if d.replaceUnhealthy() {
		return
	}
	switch {
	case d.st.InstanceID == "":
		if d.holdCreate(host) || d.limitReached(host) || d.rateLimited() {
			return
		}
		if d.st.Generation == "" {
			d.st.Generation = d.in.NewID()
		}
		if d.st.ProvisionAt.IsZero() {
			d.st.ProvisionAt = d.now
			if slices.Contains(d.extraNames(), d.st.InstanceName) {
				// The derived name is a retiring instance's (trap 5): a create under it
				// would adopt that one.
				d.st.InstanceName = providers.SuccessorName(d.in.Installation, d.st.UID, d.st.Generation)
			}
		}
		d.st.SpecHash, d.st.AuthHash, d.st.AuthRevision = hash, auth, d.in.SpecRevision
		if d.st.Reason != events.ReasonLifetimeExceeded {
			// Why the proxy has a new instance stays in sight until it runs.
			d.st.Reason, d.st.Message = events.ReasonCreating, ""
		}
		d.issue(events.OpCreate)
	case d.st.AuthHash != auth && d.st.Rollout == nil:
		// A provider that updates credentials in place gets them by an idempotent create to
		// the running instance (the local provider rewrites its proxy's auth file); the
		// others roll a new instance (roll).
		d.st.SpecHash, d.st.AuthHash, d.st.AuthRevision = hash, auth, d.in.SpecRevision
		d.issue(events.OpCreate)
	case d.st.IP == "" && d.now.Sub(d.st.ProvisionAt) >= d.p.ProvisionDeadline:
		d.st.Deadlines++
		msg := fmt.Sprintf("no address %s after create (deadline %d of %d)", d.p.ProvisionDeadline, d.st.Deadlines, d.p.MaxDeadlines)
		if d.st.Deadlines >= d.p.MaxDeadlines {
			d.fail(events.ReasonDeadline, msg)
			return
		}
		d.st.Teardown, d.st.Reason, d.st.Message = events.ReasonDeadline, events.ReasonDeadline, msg
		d.issue(events.OpDelete)
	case !d.now.Before(d.st.NextPollAt):
		d.issue(events.OpGet)
	default:
		d.wakeAt(d.st.NextPollAt)
		if !d.st.ExpiresAt.IsZero() {
			d.wakeAt(d.st.ExpiresAt) // replaced on time, whoever gets there first
		}
		if d.st.IP == "" {
			d.wakeAt(d.st.ProvisionAt.Add(d.p.ProvisionDeadline))
		}
	}
}

// expired reports whether the instance that may exist has passed its lifetime, as its mark
// says (ProxyStatus.ExpiresAt).
func (d *decider) expired() bool {
	return d.mayExist() && !d.st.ExpiresAt.IsZero() && !d.now.Before(d.st.ExpiresAt)
}

func (d *decider) lifetimeMessage(then string) string {
	return fmt.Sprintf("the instance %s passed its lifetime, which ended at %s: %s", d.st.InstanceName,
		d.st.ExpiresAt.UTC().Format(time.RFC3339), then)
}

func (d *decider) setIdentity() {
	if d.st.UID == "" {
		d.st.UID = d.in.NewID()
	}
	if d.st.InstanceName == "" || !d.mayExist() {
		// An instance that may exist keeps its name: after a switch it is its successor's
		// (decision 98), not the one derived from the UID.
		d.st.InstanceName = providers.InstanceName(d.in.Installation, d.st.UID)
	}
}

// pickHost keeps the current host while an instance may exist; otherwise placement.zone
// names it, or the proxy's name picks one by rendezvous hashing so the choice is stable.
func (d *decider) pickHost(prov ProviderInfo) (string, error) {
	cat := schemas.Catalog{d.in.Spec.Provider: prov}
	if err := cat.CheckZone("provider", "placement.zone", d.in.Spec.Provider, ""); err != nil || len(prov.Hosts) == 0 {
		return "", cmp.Or(err, fmt.Errorf("provider: %q: its hosts are not known", d.in.Spec.Provider))
	}
	if d.mayExist() && d.st.Host != "" && d.st.Provider == d.in.Spec.Provider && slices.Contains(prov.Hosts, d.st.Host) {
		return d.st.Host, nil
	}
	if z := d.in.Spec.Placement.Zone; z != "" {
		if err := cat.CheckZone("provider", "placement.zone", d.in.Spec.Provider, z); err != nil {
			return "", err
		}
		return z, nil
	}
	return rendezvous(d.in.Name, d.healthy(prov.Hosts)), nil
}

// waitForOp reports whether an op is in flight; one that got no result within OpTimeout is
// forgotten so a new one is issued (a late result no longer matches and is ignored).
func (d *decider) waitForOp() bool {
	if d.st == nil || d.st.Op == nil {
		return false
	}
	deadline := d.st.Op.IssuedAt.Add(d.p.OpTimeout)
	if d.now.Before(deadline) {
		d.wakeAt(deadline)
		return true
	}
	d.st.LastError = &events.LastError{Class: events.ClassTransient, At: d.now,
		Message: fmt.Sprintf("%s op %s got no result within %s; issuing a new one", d.st.Op.Kind, d.st.Op.ID, d.p.OpTimeout)}
	d.st.Op = nil
	return false
}

func (d *decider) waitForRetry() bool {
	if d.now.Before(d.st.RetryAt) {
		d.wakeAt(d.st.RetryAt)
		return true
	}
	return false
}

func (d *decider) issue(kind events.OpKind) {
	d.st.Op = &events.OpRef{Kind: kind, ID: d.in.NewID(), Host: d.st.Host, IssuedAt: d.now}
	d.ops = append(d.ops, OpFor(d.in.Name, *d.st))
	d.wakeAt(d.now.Add(d.p.OpTimeout))
}

// OpFor is the op in flight of a status, rebuilt from what the status records, so a new
// leader can publish again an op whose publish a crashed leader may have missed.
func OpFor(name string, st events.ProxyStatus) events.Op {
	op := events.Op{
		V: 1, ID: st.Op.ID, Kind: st.Op.Kind, Proxy: name, Provider: st.Provider, Host: st.Op.Host,
		UID: st.UID, InstanceName: st.InstanceName, InstanceID: st.InstanceID,
		SpecRevision: st.SpecRevision, IssuedAt: st.Op.IssuedAt,
	}
	if st.Op.Instance != "" {
		opOnExtra(&op, st)
		return op
	}
	if op.Kind == events.OpCreate {
		op.SpecHash, op.Generation = st.SpecHash, st.Generation
	}
	return op
}

func (d *decider) fail(reason events.Reason, msg string) {
	d.st.Phase = events.PhaseFailed
	d.st.Reason, d.st.Message = reason, msg
}

func (d *decider) wakeAt(t time.Time) {
	if d.wake.IsZero() || t.Before(d.wake) {
		d.wake = t
	}
}

// warnings are the reasons a proxy may carry without leaving its phase (Ready): their
// coming and going is news too, so it is a phase event whose phase and from are the same.
var warnings = []events.Reason{events.ReasonEgressMismatch}

// healthReasons are the reasons healthPhase sets from the probers' record; they say nothing
// once the record no longer shows them.
var healthReasons = []events.Reason{events.ReasonProbeFailing, events.ReasonHeaderLeak, events.ReasonEgressMismatch}

// authHash identifies the credentials without revealing them: salted with the UID, so equal
// passwords on two proxies do not look equal in status.
//
// A lease-mode auth hashes the mode and the key line's format: the key delivered is derived
// from the lease master and the instance's generation, and a new generation is a new create
// anyway, so the mode switching is the only change to deliver, and a new key format once
// (v2: master ID and instance, docs/leases.md). (A static pair hashes as it always has, so no
// status churns on upgrade.)
func authHash(uid string, a *schemas.Auth) string {
	if a == nil {
		return ""
	}
	if a.Lease() {
		sum := sha256.Sum256([]byte(uid + "\x00mode=" + string(schemas.AuthLease) + "\x00key=v2"))
		return hex.EncodeToString(sum[:8])
	}
	sum := sha256.Sum256([]byte(uid + "\x00" + a.Username + "\x00" + a.Password))
	return hex.EncodeToString(sum[:8])
}

func knownProviders(c map[string]ProviderInfo) string { return schemas.Catalog(c).Names() }
