package events

import "time"

// BucketProviderHealth holds one TargetHealth per provider target, key <provider>.<target>.
const BucketProviderHealth = "provider_health"

// Keys of a catalog record's limits that egressd's config sets (beside what a provider
// reports): the create-rate limit the reconciler holds a provider to.
const (
	LimitCreatesPerMinute = "createsPerMinute"
	LimitCreateBurst      = "createBurst"
	LimitMaxInstances     = "maxInstances"          // instances egressd may have on the provider
	LimitMaxPerTarget     = "maxInstancesPerTarget" // and on each of its targets
	// LimitMaxLifetimeSeconds is the lifetime of the provider's instances whose spec sets
	// none: its provisioners stamp it on each instance they create (decision 0076).
	LimitMaxLifetimeSeconds = "maxLifetimeSeconds"
	// LimitMaxUnavailable is the provider's rollout budget (decision 86): how many of its
	// proxies of their own may be draining or replaced at once for a rollout.
	LimitMaxUnavailable = "maxUnavailable"
)

// CatalogRecord is the value of a provider's key in provider_catalog: what the provider
// offers, as its provisioners published it (never secrets). The reconciler places proxies on
// its hosts; a provider without a record is unknown.
type CatalogRecord struct {
	V            int                    `json:"v"`
	Provider     string                 `json:"provider"`
	Type         string                 `json:"type"`
	Hosts        []CatalogHost          `json:"hosts"`
	MachineTypes map[string]MachineType `json:"machineTypes,omitempty"`
	Images       []string               `json:"images,omitempty"`
	Limits       map[string]int         `json:"limits,omitempty"`
	// CredentialsInPlace: the provider delivers new credentials to a running instance
	// (providers.Catalog.CredentialsInPlace); without it a credential change rolls a new one.
	CredentialsInPlace bool      `json:"credentialsInPlace,omitempty"`
	UpdatedAt          time.Time `json:"updatedAt"`
}

// CatalogHost is one concurrency domain of a provider (a hypervisor, a node, a zone) and
// the ops it takes at once.
type CatalogHost struct {
	Name             string `json:"name"`
	MaxConcurrentOps int    `json:"maxConcurrentOps"`
}

// MachineType is a size a provider offers.
type MachineType struct {
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memoryMiB"`
}

// TargetHealth is the latest check of one provider target (a host, an API endpoint).
type TargetHealth struct {
	V                  int               `json:"v"`
	Provider           string            `json:"provider"`
	Target             string            `json:"target"`
	Order              int               `json:"order"` // position in the provider's config
	Address            string            `json:"address,omitempty"`
	Ready              bool              `json:"ready"`
	Reason             string            `json:"reason"`
	Message            string            `json:"message,omitempty"` // at most 1024 characters
	LatencyMs          float64           `json:"latencyMs"`
	Details            map[string]string `json:"details,omitempty"`
	CheckedAt          time.Time         `json:"checkedAt"`
	LastTransitionTime time.Time         `json:"lastTransitionTime"` // moves only when Ready flips
	Checker            string            `json:"checker"`
}

// GCKind is what the orphan collector deleted.
type GCKind string

// GC kinds.
const (
	GCInstance GCKind = "instance" // an instance no proxy owns
	GCLeftover GCKind = "leftover" // a resource of the provider's without an instance
)

// GCDeletion describes an orphan the collector deleted (an event of kind gc).
type GCDeletion struct {
	Provider  string    `json:"provider"`
	Host      string    `json:"host,omitempty"`
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	UID       string    `json:"uid,omitempty"`
	Kind      GCKind    `json:"kind"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	// ExpiresAt is the end of the instance's lifetime, from its mark; an instance deleted
	// because it passed (event reason LifetimeExceeded) has one.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}
