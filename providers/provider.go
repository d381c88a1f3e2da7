package providers

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"
)

// Provider runs forward-proxy instances on one backend. Implementations are safe for
// concurrent use, including concurrent calls for the same instance name, and bound every
// backend call by their own budget as well as by ctx.
type Provider interface {
	// Create makes sure the instance named req.Name exists and is started, writing the marks in
	// the same call. It is idempotent by name: calling it again for an existing instance
	// returns that instance. It never returns ErrNotFound.
	Create(ctx context.Context, req CreateRequest) (Instance, error)
	// Get reads an instance by the ID Create returned. ErrNotFound only when the instance is
	// truly gone; a malformed ID is ErrPermanent. Running is reported only with an address, and
	// an instance that was created but not yet started is never Stopped.
	Get(ctx context.Context, id string) (Instance, error)
	// Delete removes the instance and every secondary resource. Deleting a missing instance
	// succeeds.
	Delete(ctx context.Context, id string) error
	// List returns every instance carrying the managed mark, with its marks read back from
	// the backend. It returns an error rather than a list it cannot vouch for.
	List(ctx context.Context) ([]Instance, error)
}

// Checker is implemented by providers that can check their backends (one verdict per target).
type Checker interface {
	Check(ctx context.Context) []TargetStatus
}

// LeftoverLister is implemented by providers whose calls can leave resources behind without
// an instance (a Create cut off before its domain was defined, unreadable state). Orphan GC
// deletes a leftover with Delete(ID) once no live proxy holds its name and it is old enough.
type LeftoverLister interface {
	Leftovers(ctx context.Context) ([]Leftover, error)
}

// Leftover is a provider resource no instance owns. It carries no marks: only its name ties
// it to a proxy.
type Leftover struct {
	ID         string    `json:"id"` // Delete(ID) removes it
	Host       string    `json:"host"`
	Name       string    `json:"name"`            // the instance name it belonged to
	Parts      []string  `json:"parts,omitempty"` // what it consists of (volume names, paths)
	ModifiedAt time.Time `json:"modifiedAt"`      // when it was last written; zero if unknown
}

// Cataloger is implemented by every provider: what it offers, for the provider_catalog bucket.
// A catalog never holds secrets.
type Cataloger interface {
	Catalog() Catalog
}

// Placement says where and how an instance runs. Fields a provider does not use are ignored
// (and documented as such), but they are still part of the spec hash.
type Placement struct {
	Region      string `json:"region,omitempty"`
	Zone        string `json:"zone,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	Image       string `json:"image,omitempty"`
}

// CreateRequest is everything a provider needs to create one instance.
type CreateRequest struct {
	Name         string // deterministic instance name, see InstanceName
	UID          string // the proxy's UID
	Installation string // this installation's ID
	Proxy        string // the proxy's name, for humans only
	Host         string // the host chosen by the reconciler, one of Catalog().Hosts
	Placement    Placement
	Port         int
	UserData     UserData // resolved user-data, delivered byte for byte; never logged
	Auth         *Auth    // optional basic auth the proxy enforces
	// Attempt names the create op this call carries out: the same for every delivery of one
	// op (a provisioner that crashed mid-call gets the op again), another for the next create
	// the reconciler issues. A provider may derive an idempotency key from it (gcp's insert
	// requestId). Empty when the caller has no ops (tests).
	Attempt string
	// Lifetime, when above zero, is how long the instance may live: Create stamps its
	// Marks.ExpiresAt (its CreatedAt plus Lifetime) on the instance, in the same call, so the
	// orphan collector can delete it when that passes without asking anyone (decision 0076).
	Lifetime time.Duration
	// Avoid are the addresses (each a prefix: an address alone, or its neighbourhood) in
	// quarantine: burned, so a new instance should not leave from them (decision 96). A
	// provider that picks its instances' addresses (local) hands out none of them, and fails
	// with ErrQuota rather than do so; one that cannot choose ignores it, and the pool
	// controller replaces a member that got one anyway. It is data, read by the caller.
	Avoid []netip.Prefix
}

// Avoided reports whether addr is in one of req's Avoid prefixes.
func (req CreateRequest) Avoided(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range req.Avoid {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Auth is a forward proxy's basic-auth credential: a static username and password, or a
// lease key.
type Auth struct {
	Username string
	Password Secret
	// LeaseKey, when set, replaces Username and Password (both empty): the proxy accepts only
	// lease tokens signed with this key (auth.mode "lease", docs/leases.md). It is the one
	// line of the proxy's auth file, <proxy>:lease:<base64url key>, to be delivered as it is:
	// unlike a password, the proxy needs the key itself to check a token's signature.
	LeaseKey Secret
}

// Lease reports whether a is a lease key rather than a password.
func (a *Auth) Lease() bool { return a != nil && a.LeaseKey != "" }

// State is an instance's lifecycle state as the backend reports it.
type State string

// Instance states. Stopped and Terminated mean the instance will not recover by itself.
const (
	StateProvisioning State = "Provisioning"
	StateRunning      State = "Running"
	StateStopped      State = "Stopped"
	StateTerminated   State = "Terminated"
)

// Instance is what a provider reports about one instance.
type Instance struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Host    string `json:"host,omitempty"`
	State   State  `json:"state"`
	Address string `json:"address,omitempty"` // IP the proxy listens on; set when Running
	Port    int    `json:"port,omitempty"`
	// EgressIP is the address the proxy's traffic leaves from, when the provider knows it
	// (local with bindSource: its own address); the probers check it against what sites see.
	EgressIP string `json:"egressIp,omitempty"`
	Marks    Marks  `json:"marks"`
}

// Marks identify an instance as ours. They are written by Create and read back from the
// backend by Get and List; a provider never answers them from memory.
type Marks struct {
	Managed      bool      `json:"managed"`
	UID          string    `json:"uid"`
	Installation string    `json:"installation"`
	CreatedAt    time.Time `json:"createdAt"` // zero means very old
	// ExpiresAt is when the instance's lifetime ends (CreateRequest.Lifetime), written with
	// CreatedAt; zero means it has none. A value that does not parse reads as zero: the
	// collector never deletes a proxy's working instance on a garbled mark (an orphan still
	// goes, as every orphan does).
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Expired reports whether the instance's lifetime has passed at now.
func (m Marks) Expired(now time.Time) bool { return !m.ExpiresAt.IsZero() && !now.Before(m.ExpiresAt) }

// ExpiryOf is the ExpiresAt of an instance created at createdAt for lifetime (zero: none).
func ExpiryOf(createdAt time.Time, lifetime time.Duration) time.Time {
	if lifetime <= 0 {
		return time.Time{}
	}
	return createdAt.Add(lifetime)
}

// Catalog describes what a provider offers. It never holds secrets.
type Catalog struct {
	Type         string                 `json:"type"`
	Hosts        []Host                 `json:"hosts"`
	MachineTypes map[string]MachineType `json:"machineTypes,omitempty"`
	Images       []string               `json:"images,omitempty"`
	Limits       map[string]int         `json:"limits,omitempty"`
	// CredentialsInPlace says Create, called again for a running instance with other
	// credentials, delivers them to it without a new instance (the local provider rewrites
	// its proxy's auth file). A provider without it is given new credentials only on a new
	// instance: the reconciler rolls one (decision 87, docs/provider-contract.md).
	CredentialsInPlace bool `json:"credentialsInPlace,omitempty"`
}

// Host is one concurrency domain of a provider: a hypervisor, a node, a zone.
type Host struct {
	Name             string `json:"name"`
	MaxConcurrentOps int    `json:"maxConcurrentOps"`
}

// MachineType is a named size.
type MachineType struct {
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memoryMiB"`
}

// CheckReason is why a Checker judged a target as it did, one word in UpperCamelCase. The
// reasons every provider can meet are declared here, so that one cause reads the same on
// every provider; a provider declares its own only for what no other has (a zone, a storage
// pool, a template).
type CheckReason string

// The reasons shared by every provider.
const (
	CheckReachable              CheckReason = "Reachable"
	CheckUnreachable            CheckReason = "Unreachable"
	CheckCredentialsUnavailable CheckReason = "CredentialsUnavailable" // the credential file cannot be read
	CheckCredentialsInvalid     CheckReason = "CredentialsInvalid"     // it is read, but does not parse
	CheckUnauthorized           CheckReason = "Unauthorized"           // the API refuses who we are
	CheckForbidden              CheckReason = "Forbidden"              // it refuses what we asked
	CheckTimeout                CheckReason = "Timeout"
	CheckRateLimited            CheckReason = "RateLimited"
	CheckAPIError               CheckReason = "APIError" // any other answer of the API
)

// TargetStatus is one verdict of a Checker.
type TargetStatus struct {
	Name    string            `json:"name"`
	Address string            `json:"address,omitempty"`
	Ready   bool              `json:"ready"`
	Reason  CheckReason       `json:"reason"`
	Message string            `json:"message,omitempty"`
	Latency time.Duration     `json:"latency"`
	Details map[string]string `json:"details,omitempty"`
}

// Secret is a string that never prints: fmt, slog and JSON all see a redaction.
type Secret string

func (Secret) String() string                  { return "[redacted]" }
func (Secret) GoString() string                { return "[redacted]" }
func (Secret) LogValue() slog.Value            { return slog.StringValue("[redacted]") }
func (Secret) MarshalJSON() ([]byte, error)    { return []byte(`"[redacted]"`), nil }
func (s Secret) Format(f fmt.State, verb rune) { fmt.Fprint(f, "[redacted]") }

// Reveal returns the secret's value for the one place that must use it.
func (s Secret) Reveal() string { return string(s) }

// UserData is cloud-init user-data. Like Secret, it never prints; only its size does.
type UserData []byte

func (u UserData) String() string                { return fmt.Sprintf("[user-data %d bytes]", len(u)) }
func (u UserData) GoString() string              { return u.String() }
func (u UserData) LogValue() slog.Value          { return slog.StringValue(u.String()) }
func (u UserData) MarshalJSON() ([]byte, error)  { return []byte(`"` + u.String() + `"`), nil }
func (u UserData) Format(f fmt.State, verb rune) { fmt.Fprint(f, u.String()) }
