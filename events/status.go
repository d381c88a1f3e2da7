package events

import (
	"net"
	"strconv"
	"time"
)

// Phase is a proxy's lifecycle phase.
type Phase string

// Phases (DESIGN §3.4).
const (
	PhasePending      Phase = "Pending"
	PhaseInvalid      Phase = "Invalid"
	PhaseProvisioning Phase = "Provisioning"
	PhaseRunning      Phase = "Running"
	PhaseReady        Phase = "Ready"
	PhaseUnhealthy    Phase = "Unhealthy"
	PhaseReplacing    Phase = "Replacing"
	PhaseDeleting     Phase = "Deleting"
	PhaseWaiting      Phase = "Waiting"
	PhaseFailed       Phase = "Failed"
)

// Reason says why a proxy is where it is (ProxyStatus.Reason and Teardown) or why an event
// happened (Event.Reason). Every reason egressd writes is one of the constants of this
// package; Event.Reason of op, progress and report events carries the op's error class, the
// provider's progress phase and the report result, converted.
type Reason string

// Reasons the reconciler records in proxy_status.
const (
	ReasonInvalidSpec       Reason = "InvalidSpec"
	ReasonUnknownProvider   Reason = "UnknownProvider"
	ReasonProviderRemoved   Reason = "ProviderRemoved" // an instance may exist on a provider no longer configured
	ReasonInvalidPlacement  Reason = "InvalidPlacement"
	ReasonCloudInitNotFound Reason = "CloudInitNotFound"
	ReasonQuota             Reason = "QuotaExceeded"
	ReasonTransient         Reason = "TransientError"
	ReasonPermanent         Reason = "PermanentError"
	ReasonDeadline          Reason = "ProvisioningDeadline"
	ReasonSpecChanged       Reason = "SpecChanged"
	ReasonProviderChanged   Reason = "ProviderChanged"
	ReasonModeChanged       Reason = "ModeChanged"
	ReasonInstanceLost      Reason = "InstanceLost"
	ReasonAddressLost       Reason = "AddressLost"
	ReasonProxyDeleted      Reason = "ProxyDeleted"
	ReasonCreating          Reason = "Creating"
	// ReasonProviderUnhealthy: the provider target the proxy is placed on fails its check, so
	// no create is sent there until it passes again (a create could only fail).
	ReasonProviderUnhealthy Reason = "ProviderUnhealthy"
	// ReasonRateLimited: the provider's create-rate limit (maxCreatesPerMinute) is used up;
	// the message says when the next create may go.
	ReasonRateLimited Reason = "RateLimited"
	// ReasonLimitReached: a new instance would pass the provider's maxInstances (or
	// maxInstancesPerTarget); the proxy is created when room appears, oldest first.
	ReasonLimitReached Reason = "LimitReached"
	// ReasonLifetimeExceeded: the instance passed its lifetime (maxLifetimeSeconds, stamped on
	// it at creation): the collector deleted it, or the reconciler does, and a new one is
	// made (a teardown reason; also the reason of the collector's gc event).
	ReasonLifetimeExceeded Reason = "LifetimeExceeded"
	// ReasonUnhealthyReplaced: the instance stayed Unhealthy past the reconciler's
	// replaceAfter; it is deleted and created again (a teardown reason).
	ReasonUnhealthyReplaced Reason = "UnhealthyReplaced"
	// ReasonSuspect: so many proxies of a provider target or a pool turned Unhealthy together
	// that the fault is more likely theirs in common (the network, the probe path) than each
	// one's: replacements for health are held (an event reason; the status says it in
	// ProxyStatus.Suspect).
	ReasonSuspect Reason = "Suspect"
	// ReasonSuspectCleared: the share fell back; replacements for health go on.
	ReasonSuspectCleared    Reason = "SuspectCleared"
	ReasonWaitingForAddress Reason = "WaitingForAddress"
	ReasonProbeFailing      Reason = "ProbeFailing"
	// ReasonExternalEndpoint is the reason every external proxy's status carries: it restates
	// the mode, and readers of the fleet show a reason that explains more (ProbeOverdue) over it.
	ReasonExternalEndpoint Reason = "ExternalEndpoint"
)

// ProxyStatus is what the reconciler (its only writer) records for a proxy in proxy_status.
type ProxyStatus struct {
	V            int    `json:"v"`
	Phase        Phase  `json:"phase"`
	Mode         string `json:"mode,omitempty"`
	UID          string `json:"uid,omitempty"`
	InstanceName string `json:"instanceName,omitempty"`
	InstanceID   string `json:"instanceId,omitempty"`
	Provider     string `json:"provider,omitempty"`
	Host         string `json:"host,omitempty"`
	IP           string `json:"ip,omitempty"`
	Port         int    `json:"port,omitempty"`
	// ExpectedEgress is where the proxy's traffic should leave from, when that is known: the
	// instance's own address when its provider says so (local with bindSource), an external
	// endpoint's expectedEgress. The probers compare it with what their echo endpoint sees.
	ExpectedEgress string `json:"expectedEgress,omitempty"`
	SpecHash       string `json:"specHash,omitempty"` // hash of the instance that exists
	AuthHash       string `json:"authHash,omitempty"` // salted hash of the auth last delivered
	// AuthRevision is the revision of the proxy's key in proxies whose auth the instance
	// carries: the leasers and probers present that revision's credentials (never stored
	// here) until a successor with the spec's own is Ready (decision 87). 0: the spec's.
	AuthRevision uint64     `json:"authRevision,omitempty"`
	SpecRevision uint64     `json:"specRevision,omitempty"` // KV revision of the spec last acted on
	Teardown     Reason     `json:"teardown,omitempty"`     // why the current instance must go
	Op           *OpRef     `json:"op,omitempty"`
	LastError    *LastError `json:"lastError,omitempty"`
	Reason       Reason     `json:"reason,omitempty"`
	Message      string     `json:"message,omitempty"`
	Failures     int        `json:"failures,omitempty"`  // consecutive transient failures
	Deadlines    int        `json:"deadlines,omitempty"` // provisioning deadlines missed
	AddrMisses   int        `json:"addrMisses,omitempty"`
	RetryAt      time.Time  `json:"retryAt,omitzero"`
	NextPollAt   time.Time  `json:"nextPollAt,omitzero"`
	ProvisionAt  time.Time  `json:"provisionAt,omitzero"` // when the current create began
	// Generation is a fresh ID for each instance the proxy gets (set when its create is first
	// issued, cleared once it is gone): lease tokens carry it, and the instance's key derives
	// from it, so an instance rebuilt under the proxy's name refuses its predecessor's tokens.
	Generation string    `json:"generation,omitempty"`
	AddressAt  time.Time `json:"addressAt,omitzero"` // when ip:port last changed
	CreatedAt  time.Time `json:"createdAt,omitzero"`
	ReadyAt    time.Time `json:"readyAt,omitzero"`
	// ExpiresAt is when the instance's lifetime ends, as its own mark says (the provisioner
	// reads it back): the collector deletes it then, and the reconciler replaces it; zero:
	// no lifetime.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
	// Pool is the pool the proxy is a member of (its spec's), so that readers of statuses
	// alone (the brake's tally) can group by pool.
	Pool string `json:"pool,omitempty"`
	// Suspect, on an Unhealthy proxy, says the brake holds its replacement: the group it
	// belongs to has too many Unhealthy proxies at once.
	Suspect Suspect `json:"suspect,omitzero"`
	// Rollout, on a proxy whose instance must be replaced for a change, says why and how far
	// (events.Rollout, decision 86).
	Rollout *Rollout `json:"rollout,omitempty"`
	// Successor is the instance being built to take the proxy's place in a rollout, and
	// Retiring the instances it replaced that serve the leases granted on them until those
	// end (events.InstanceRef, decision 98).
	Successor *InstanceRef  `json:"successor,omitempty"`
	Retiring  []InstanceRef `json:"retiring,omitempty"`
}

// Scopes of the brake: a provider target, or a pool.
const (
	SuspectTarget = "target"
	SuspectPool   = "pool"
)

// Suspect is a group of proxies the brake holds: Name is <provider>/<target> for a target,
// the pool's name for a pool; Unhealthy of Total of its proxies with an instance were
// Unhealthy when it was last decided.
type Suspect struct {
	Scope     string `json:"scope,omitempty"`
	Name      string `json:"name,omitempty"`
	Unhealthy int    `json:"unhealthy,omitempty"`
	Total     int    `json:"total,omitempty"`
}

// String says it for humans.
func (s Suspect) String() string {
	if s.Scope == "" {
		return ""
	}
	return s.Scope + " " + s.Name + " is Suspect: " + strconv.Itoa(s.Unhealthy) + " of " + strconv.Itoa(s.Total) +
		" proxies Unhealthy at once; replacements for health are held"
}

// MayExist says whether an instance may exist: one was reported, or a create was issued and
// no delete has confirmed it gone since. The instance limits count these.
func (s ProxyStatus) MayExist() bool { return s.InstanceID != "" || !s.ProvisionAt.IsZero() }

// Incarnation names the instance the status describes, "" while there is none: the
// instance ID with the start of the create that made it, since a replacement may reuse the
// instance's name and ID.
func (s ProxyStatus) Incarnation() string {
	if !s.MayExist() {
		return ""
	}
	return s.InstanceID + "@" + s.ProvisionAt.UTC().Format(time.RFC3339Nano)
}

// Address is the proxy's ip:port, or "" while it has none.
func (s *ProxyStatus) Address() string {
	if s == nil || s.IP == "" {
		return ""
	}
	return net.JoinHostPort(s.IP, strconv.Itoa(s.Port))
}

// OpRef is the op in flight for a proxy. At most one exists at a time.
type OpRef struct {
	Kind     OpKind    `json:"kind"`
	ID       string    `json:"id"`
	Host     string    `json:"host"`
	IssuedAt time.Time `json:"issuedAt"`
	Attempts int       `json:"attempts"`
	// Instance names the instance the op is on when it is not the one the status describes
	// (its successor or a retiring one, decision 98): a new leader rebuilds the op for it and
	// its result is folded into its record. Empty: the status's own instance.
	Instance string `json:"instance,omitempty"`
}

// LastError is the most recent provider error, visible to users whatever its class.
type LastError struct {
	Class   ErrorClass `json:"class"`
	Message string     `json:"message"`
	At      time.Time  `json:"at"`
}
