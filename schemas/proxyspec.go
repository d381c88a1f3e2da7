package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
)

// Modes of a proxy.
const (
	ModeManaged  = "managed"
	ModeExternal = "external"
)

// Levels of healthCheck.requireAnonymity; the others are events.Anonymity's.
const (
	AnonymityNone      = "none"
	AnonymityAnonymous = "anonymous"
	AnonymityElite     = "elite"
)

// Defaults applied by ParseProxySpec.
const (
	DefaultPort             = 3128
	DefaultMaxLeases        = 1
	DefaultIntervalSeconds  = 30
	DefaultTimeoutSeconds   = 5
	DefaultFailureThreshold = 3
	DefaultSuccessThreshold = 1
)

// Bounds of maxLifetimeSeconds (0 is none): at least ten seconds, at most a year, so that it
// converts to a time.Duration without overflowing.
const (
	MinLifetimeSeconds = 10
	MaxLifetimeSeconds = 365 * 86400
)

// ProxySpec v1: a desired proxy, the value of a key in the proxies bucket.
type ProxySpec struct {
	V            int               `json:"v,omitempty"`
	Mode         string            `json:"mode,omitempty"`
	Provider     string            `json:"provider,omitempty"`
	Placement    Placement         `json:"placement,omitzero"`
	Port         int               `json:"port,omitempty"`
	CloudInit    string            `json:"cloudInit,omitempty"`
	CloudInitRef string            `json:"cloudInitRef,omitempty"`
	Endpoint     *Endpoint         `json:"endpoint,omitempty"`
	Auth         *Auth             `json:"auth,omitempty"`
	Attributes   map[string]string `json:"attributes,omitempty"`
	MaxLeases    *int              `json:"maxLeases,omitempty"`
	HealthCheck  HealthCheck       `json:"healthCheck,omitzero"`
	// MaxLifetimeSeconds bounds how long a managed proxy's instance lives: it is stamped on the
	// instance when it is created, and the provisioners' orphan collector deletes it once
	// passed, whether a reconciler runs or not (decision 0076). 0: the provider's default
	// (maxLifetimeSeconds in its config entry), or none. It never replaces an instance by
	// itself changing: it applies to the instances created after the change.
	MaxLifetimeSeconds int `json:"maxLifetimeSeconds,omitempty"`
	// Pool names the pool that owns this proxy (a member); only that pool's controller
	// writes it. Drain stops new leases while those held run on. Neither replaces an instance.
	Pool  string `json:"pool,omitempty"`
	Drain bool   `json:"drain,omitempty"`
}

// Placement says where a managed proxy runs; its meaning is the provider's.
type Placement struct {
	Region      string `json:"region,omitempty"`
	Zone        string `json:"zone,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	Image       string `json:"image,omitempty"`
}

// Endpoint is an external proxy's address.
type Endpoint struct {
	Host string `json:"host"`
	Port int    `json:"port,omitempty"`
	// ExpectedEgress is the IP address sites should see traffic come from; another one seen
	// by the probers is a warning (EgressMismatch).
	ExpectedEgress string `json:"expectedEgress,omitempty"`
}

// AuthMode says where a proxy's credentials come from.
type AuthMode string

// Auth modes. "" is AuthStatic.
const (
	// AuthStatic: one username and password, the same for every holder.
	AuthStatic AuthMode = "static"
	// AuthLease: every lease carries credentials of its own, valid for that lease's
	// lifetime, which the proxy checks offline (internal/leaseauth, docs/leases.md).
	AuthLease AuthMode = "lease"
)

// Auth is the basic-auth credential handed out with leases: a static username and password,
// or, with Mode AuthLease, none here (each lease gets its own).
type Auth struct {
	Mode     AuthMode `json:"mode,omitempty"`
	Username string   `json:"username,omitempty"`
	Password string   `json:"password,omitempty"`
}

// Lease reports whether a has each lease carry its own credentials.
func (a *Auth) Lease() bool { return a != nil && a.Mode == AuthLease }

// HealthCheck configures probes through the proxy.
type HealthCheck struct {
	IntervalSeconds  int    `json:"intervalSeconds,omitempty"`
	TimeoutSeconds   int    `json:"timeoutSeconds,omitempty"`
	FailureThreshold int    `json:"failureThreshold,omitempty"`
	SuccessThreshold int    `json:"successThreshold,omitempty"`
	URL              string `json:"url,omitempty"`
	// RequireAnonymity makes a proxy less anonymous than this Unhealthy (HeaderLeak):
	// "none" (the default), "anonymous" or "elite".
	RequireAnonymity string `json:"requireAnonymity,omitempty"`
}

// ParseProxySpec decodes and validates a spec strictly (unknown or miscased fields, null,
// repeated keys and trailing data are rejected) and applies the defaults. Its error names the
// offending field; it never quotes user-data or a password.
func ParseProxySpec(data []byte) (ProxySpec, error) {
	// The version is checked before anything else: a newer spec may use fields this version
	// does not know, and "unsupported version" is the message that helps.
	if v, ok := declaredVersion(data); ok && v != 1 {
		return ProxySpec{}, versionError(v)
	}
	var s ProxySpec
	err := parseAll(data, &s, func() error {
		s.applyDefaults()
		return s.Validate()
	})
	if err != nil {
		return ProxySpec{}, err
	}
	return s, nil
}

// declaredVersion is the integer "v" of a JSON object, if it has one.
func declaredVersion(data []byte) (int, bool) {
	var head map[string]json.RawMessage
	var v *int
	if json.Unmarshal(data, &head) != nil || json.Unmarshal(head["v"], &v) != nil || v == nil {
		return 0, false
	}
	return *v, true
}

func (s *ProxySpec) applyDefaults() {
	if s.V == 0 {
		s.V = 1
	}
	if s.Mode == "" {
		s.Mode = ModeManaged
	}
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	if len(s.Attributes) == 0 {
		s.Attributes = nil // "attributes": {} and no attributes are one spec
	}
	if s.Endpoint != nil && s.Endpoint.Port == 0 {
		s.Endpoint.Port = s.Port
	}
	if s.MaxLeases == nil {
		n := DefaultMaxLeases
		s.MaxLeases = &n
	}
	h := &s.HealthCheck
	if h.IntervalSeconds == 0 {
		h.IntervalSeconds = DefaultIntervalSeconds
	}
	if h.TimeoutSeconds == 0 {
		// Never above the interval, and never below 1 when the interval is itself invalid,
		// so that one mistake gets one error.
		h.TimeoutSeconds = min(DefaultTimeoutSeconds, max(h.IntervalSeconds, 1))
	}
	if h.FailureThreshold == 0 {
		h.FailureThreshold = DefaultFailureThreshold
	}
	if h.SuccessThreshold == 0 {
		h.SuccessThreshold = DefaultSuccessThreshold
	}
	if h.RequireAnonymity == "" {
		h.RequireAnonymity = AnonymityNone
	}
}

// Hash is the identity of the instance a spec asks for: the placement, the resolved
// user-data and the effective port. Attributes, lease limits, health settings and auth are
// left out on purpose, so changing them never replaces an instance.
func (s ProxySpec) Hash(userData []byte) string {
	h := sha256.New()
	for _, f := range []string{s.Placement.Region, s.Placement.Zone, s.Placement.MachineType, s.Placement.Image} {
		h.Write([]byte(strconv.Itoa(len(f)) + ":" + f + ";"))
	}
	h.Write([]byte(strconv.Itoa(len(userData)) + ":"))
	h.Write(userData)
	h.Write([]byte(";port:" + strconv.Itoa(s.Port)))
	return hex.EncodeToString(h.Sum(nil))[:16]
}
