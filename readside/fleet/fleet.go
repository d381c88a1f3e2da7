package fleet

import (
	"strconv"
	"time"

	"github.com/egressd/egressd/events"
)

// Fleet is every proxy as of one read.
type Fleet struct {
	At     time.Time
	Rows   []Row     // one per proxy, by name
	Pools  []PoolRow // one per pool, by name
	Totals Totals
	Errors []ReadError // buckets that could not be read, by name; their parts are empty
	// Leases is every held slot and the sums by holder, with Buckets.LeaseDetail; else nil.
	Leases *Leases
	// Demand is what the leasers measure, summed by scope: a pool's name (also in its
	// PoolRow), or a selector's events.SelectorScope for a selector that matches no pool.
	Demand map[string]events.DemandSum
}

// Health is the probers' verdict on the address a proxy has now.
type Health string

// Health values. A verdict exists only once a prober's thresholds produced one for the
// proxy's current address and it is not stale (older than events.ProbeOverdueAfter): a
// record about a previous address, one still short of its thresholds, or one nobody has
// renewed in time says nothing about the proxy now.
const (
	HealthTrue    Health = "True"
	HealthFalse   Health = "False"
	HealthUnknown Health = "unknown"
)

// Row is one proxy: a spec without a status yet is Pending; a status without a spec is a
// proxy being deleted (or a reader without read access to specs).
type Row struct {
	Name     string       `json:"name"`
	Mode     string       `json:"mode"`     // managed or external; "?" while unknown
	Provider string       `json:"provider"` // "external" for external proxies
	Phase    events.Phase `json:"phase"`
	Address  string       `json:"address"` // ip:port, empty while it has none
	Healthy  Health       `json:"healthy"`
	// Anonymity is what the proxy reveals to sites, as the probers judged its current
	// instance (events.ProxyHealth.AnonymityVerdict); "" unknown. LeakedHeaders names the
	// headers that gave it away; EgressMismatch: its traffic leaves from another address than
	// expected. All three come from a record about the current address only.
	Anonymity      events.Anonymity `json:"anonymity,omitempty"`
	LeakedHeaders  []string         `json:"leakedHeaders,omitempty"`
	EgressMismatch bool             `json:"egressMismatch,omitempty"`
	// ProbeOverdue: no probe at the current address within events.ProbeOverdueAfter of the
	// spec's interval (see probeOverdue).
	ProbeOverdue bool              `json:"probeOverdue"`
	Leases       int               `json:"leases"`    // slots held now
	MaxLeases    *int              `json:"maxLeases"` // null when the spec is missing, invalid or not readable
	Reason       events.Reason     `json:"reason,omitempty"`
	Message      string            `json:"message,omitempty"`
	LastError    string            `json:"lastError,omitempty"` // class: message of the last provider error
	Attributes   map[string]string `json:"attributes,omitempty"`
	LastProbeAt  time.Time         `json:"lastProbeAt,omitzero"` // of the last probe at the current address
	CreatedAt    time.Time         `json:"createdAt,omitzero"`   // first status (a replacement keeps it), else the spec's creation
	Age          string            `json:"age"`
	// Pool is the pool the proxy is a member of: its spec's owner or, without a readable
	// spec, the pool whose ledger lists it. Drain: its spec is marked drain (no new leases).
	Pool  string `json:"pool,omitempty"`
	Drain bool   `json:"drain,omitempty"`
	// Status is the full recorded status, for `egressd status -o json`; nil when there is
	// none yet. It never holds a secret (the reconciler keeps only a salted hash of auth).
	Status *events.ProxyStatus `json:"status,omitempty"`

	interval time.Duration // the spec's probe interval; 0 while unknown
}

// LeasesText is the LEASES column of a proxy, as every view prints it: slots held, then the
// spec's maxLeases; "-" for it on a proxy being deleted (its spec is gone: it takes no more
// leases), "?" when the spec does not parse or cannot be read.
func (r Row) LeasesText() string {
	max := "?"
	switch {
	case r.MaxLeases != nil:
		max = strconv.Itoa(*r.MaxLeases)
	case r.Phase == events.PhaseDeleting:
		max = "-"
	}
	return strconv.Itoa(r.Leases) + "/" + max
}

// Totals are counted over the whole fleet, whatever a reader filters.
type Totals struct {
	Proxies       int
	Phases        map[events.Phase]int
	Healthy       int
	Unhealthy     int
	HealthUnknown int
	ProbeOverdue  int
	// Anonymity counts the proxies that have an address by verdict, "" for unknown.
	Anonymity map[events.Anonymity]int
	// Leases is every held slot, also one whose proxy was deleted while its lease runs: the
	// rows' Leases may sum to less.
	Leases        int
	LeaseCapacity int // maxLeases summed over Ready proxies
	Pools         int
	PoolPhases    map[events.PoolPhase]int
}
