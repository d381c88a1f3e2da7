package gcp

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/providers"
)

// Config configures a gcp provider. Its JSON and YAML names are the keys of the `gcp:` block
// of egressd's config (decoded strictly); errors from Validate name the key as the YAML
// spells it, e.g. `zones[1].name`.
type Config struct {
	// Project is the Google Cloud project ID the instances live in.
	Project string `json:"project" yaml:"project"`
	// Zones are the hosts of the catalog: placement.zone names one. Each runs at most
	// MaxConcurrentOps ops at once.
	Zones []ZoneConfig `json:"zones" yaml:"zones"`
	// MachineTypes are the sizes placement.machineType may name, by key.
	MachineTypes map[string]MachineType `json:"machineTypes" yaml:"machineTypes"`
	// Images are the boot images placement.image may name, by key: an image or image family,
	// as "projects/P/global/images/NAME", "projects/P/global/images/family/F" or the https URL.
	Images map[string]string `json:"images" yaml:"images"`
	// Network is the VPC network of the instances' one NIC. Default "default".
	Network string `json:"network,omitempty" yaml:"network,omitempty"`
	// Subnetwork is the NIC's subnetwork, "regions/R/subnetworks/S" (or its URL), for
	// custom-mode networks. Default: none (auto-mode networks pick the zone's).
	Subnetwork string `json:"subnetwork,omitempty" yaml:"subnetwork,omitempty"`
	// NetworkTags are added to every instance (for the user's own firewall rules and routes).
	NetworkTags []string `json:"networkTags,omitempty" yaml:"networkTags,omitempty"`
	// DiskSizeGb is the boot disk, in GB. Default 10.
	DiskSizeGb int `json:"diskSizeGb,omitempty" yaml:"diskSizeGb,omitempty"`
	// ExternalIP is "ephemeral" (default: an ephemeral external address, the proxy's address
	// and egress IP) or "none" (internal address only, for Cloud NAT setups).
	ExternalIP string `json:"externalIP,omitempty" yaml:"externalIP,omitempty"`
	// Spot makes the instances Spot VMs.
	Spot *SpotConfig `json:"spot,omitempty" yaml:"spot,omitempty"`
	// ServiceAccount is the email of the service account the instances run as. Default: none
	// (no service account, no API access from the VM). Needs roles/iam.serviceAccountUser.
	ServiceAccount string `json:"serviceAccount,omitempty" yaml:"serviceAccount,omitempty"`
	// CredentialsFile is a credential JSON file (service account key, authorized user,
	// workload identity federation). It is read on every call, so a rotated file is picked up
	// without a restart. Default: Application Default Credentials, found the same way on
	// every call.
	CredentialsFile string `json:"credentialsFile,omitempty" yaml:"credentialsFile,omitempty"`
	// Endpoint replaces https://compute.googleapis.com (private endpoints, the simulator).
	Endpoint string `json:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	// Firewall is the rule egressd keeps open for the proxy port.
	Firewall FirewallConfig `json:"firewall,omitempty" yaml:"firewall,omitempty"`
	// Budgets bound each kind of call; zero fields take their defaults.
	Budgets Budgets `json:"budgets,omitempty" yaml:"budgets,omitempty"`
}

// ZoneConfig is one zone: a host of the catalog.
type ZoneConfig struct {
	// Name is the zone, e.g. us-central1-a.
	Name string `json:"name" yaml:"name"`
	// MaxConcurrentOps is how many ops may run in this zone at once. Default 4.
	MaxConcurrentOps int `json:"maxConcurrentOps,omitempty" yaml:"maxConcurrentOps,omitempty"`
}

// MachineType is a size placement.machineType names.
type MachineType struct {
	// Type is the Compute Engine machine type, e.g. e2-small.
	Type string `json:"type" yaml:"type"`
	// VCPUs and MemoryMiB are for the catalog only (what the type offers); optional.
	VCPUs     int `json:"vcpus,omitempty" yaml:"vcpus,omitempty"`
	MemoryMiB int `json:"memoryMiB,omitempty" yaml:"memoryMiB,omitempty"`
}

// SpotConfig makes instances Spot VMs.
type SpotConfig struct {
	// InstanceTerminationAction is what a preemption does: DELETE (default: the instance is
	// deleted and egressd creates it again) or STOP (it is TERMINATED, which egressd reads as
	// Terminated and replaces).
	InstanceTerminationAction string `json:"instanceTerminationAction,omitempty" yaml:"instanceTerminationAction,omitempty"`
}

// FirewallConfig is the ingress rule for the proxy port: one per network and port, owned by
// egressd, created before the first instance that needs it and deleted with the last.
type FirewallConfig struct {
	// Manage turns the rule on. Default true; false when you open the port yourself.
	Manage *bool `json:"manage,omitempty" yaml:"manage,omitempty"`
	// SourceRanges may reach the proxy port: your crawlers and egressd's probers. Required
	// when the rule is managed: a proxy open to 0.0.0.0/0 is an open proxy to the internet
	// unless every spec sets auth.
	SourceRanges []string `json:"sourceRanges,omitempty" yaml:"sourceRanges,omitempty"`
}

// Budgets bound each kind of backend call; a call also ends with its caller's context.
type Budgets struct {
	// Call bounds one API call. Default 30s.
	Call Duration `json:"call,omitempty" yaml:"call,omitempty"`
	// Delete bounds waiting for a delete operation, after which the firewall rule the
	// instance used is collected if no other instance uses it. Default 60s.
	Delete Duration `json:"delete,omitempty" yaml:"delete,omitempty"`
}

// Duration is providers.Duration: a Go duration string ("30s") in JSON and YAML.
type Duration = providers.Duration

// Defaults and bounds.
const (
	DefaultMaxConcurrentOps = 4
	DefaultDiskSizeGb       = 10
	DefaultNetwork          = "default"
	ExternalIPEphemeral     = "ephemeral"
	ExternalIPNone          = "none"
	TerminationDelete       = "DELETE"
	TerminationStop         = "STOP"

	maxDiskSizeGb  = 65536
	defaultCall    = 30 * time.Second
	defaultDelete  = 60 * time.Second
	maxNetworkTags = 60 // the service allows 64 tags; egressd adds its own
)

var (
	// resourceName is RFC 1035, what Compute Engine requires of names and tags.
	resourceName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// projectID: 6 to 30 characters, lowercase letters, digits and hyphens, starting with a letter
	// (https://cloud.google.com/resource-manager/docs/creating-managing-projects); domain-scoped
	// projects add "example.com:".
	projectID = regexp.MustCompile(`^([a-z][-a-z0-9.]*[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$`)
	// imageRef is a relative image or family reference.
	imageRef = regexp.MustCompile(`^(projects/[a-z][-a-z0-9.:]*[a-z0-9]/)?global/images/(family/)?[a-z]([-a-z0-9]*[a-z0-9])?$`)
	// subnetRef is a relative subnetwork reference.
	subnetRef   = regexp.MustCompile(`^(projects/[a-z][-a-z0-9.:]*[a-z0-9]/)?regions/[a-z0-9-]+/subnetworks/[a-z]([-a-z0-9]*[a-z0-9])?$`)
	serviceAcct = regexp.MustCompile(`^[a-z0-9][-a-z0-9._]*@[a-z0-9][-a-z0-9.]*\.[a-z]+$`)
)

// Validate checks the config. Every problem is reported, each naming its key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if !projectID.MatchString(c.Project) {
		bad("project", "%q is not a project ID (6 to 30 lowercase letters, digits and '-', starting with a letter)", c.Project)
	}
	if len(c.Zones) == 0 {
		bad("zones", "at least one zone is required")
	}
	seen := map[string]bool{}
	for i, z := range c.Zones {
		at := fmt.Sprintf("zones[%d]", i)
		switch {
		case !providers.ValidName(z.Name) || strings.Count(z.Name, "-") < 2:
			bad(at+".name", "%q is not a zone name like us-central1-a", z.Name)
		case seen[z.Name]:
			bad(at+".name", "duplicate zone %q", z.Name)
		}
		seen[z.Name] = true
		if z.MaxConcurrentOps < 0 {
			bad(at+".maxConcurrentOps", "must not be negative, got %d", z.MaxConcurrentOps)
		}
	}
	if len(c.MachineTypes) == 0 {
		bad("machineTypes", "at least one machine type is required")
	}
	for _, key := range slices.Sorted(maps.Keys(c.MachineTypes)) {
		mt, at := c.MachineTypes[key], "machineTypes."+key
		if !providers.ValidKey(key) {
			bad(at, "the key is not an identifier (letters, digits, '_', '.', '-'; at most 63)")
		}
		if !resourceName.MatchString(mt.Type) {
			bad(at+".type", "%q is not a machine type name like e2-small", mt.Type)
		}
		if mt.VCPUs < 0 || mt.MemoryMiB < 0 {
			bad(at, "vcpus and memoryMiB must not be negative")
		}
	}
	if len(c.Images) == 0 {
		bad("images", "at least one image is required")
	}
	for _, key := range slices.Sorted(maps.Keys(c.Images)) {
		at := "images." + key
		if !providers.ValidKey(key) {
			bad(at, "the key is not an identifier (letters, digits, '_', '.', '-'; at most 63)")
		}
		if err := checkImage(c.Images[key]); err != nil {
			bad(at, "%v", err)
		}
	}
	if c.Network != "" && !resourceName.MatchString(c.Network) {
		bad("network", "%q is not a network name", c.Network)
	}
	if c.Subnetwork != "" && !subnetRef.MatchString(strings.TrimPrefix(c.Subnetwork, selfLinkBase)) {
		bad("subnetwork", "%q is not regions/REGION/subnetworks/NAME", c.Subnetwork)
	}
	if len(c.NetworkTags) > maxNetworkTags {
		bad("networkTags", "at most %d tags, got %d", maxNetworkTags, len(c.NetworkTags))
	}
	for i, tag := range c.NetworkTags {
		if !resourceName.MatchString(tag) {
			bad(fmt.Sprintf("networkTags[%d]", i), "%q is not a tag (RFC 1035: lowercase letters, digits and '-')", tag)
		}
	}
	if c.DiskSizeGb < 0 || c.DiskSizeGb > maxDiskSizeGb {
		bad("diskSizeGb", "must be between 0 (default %d) and %d, got %d", DefaultDiskSizeGb, maxDiskSizeGb, c.DiskSizeGb)
	}
	if !slices.Contains([]string{"", ExternalIPEphemeral, ExternalIPNone}, c.ExternalIP) {
		bad("externalIP", "%q is not ephemeral or none", c.ExternalIP)
	}
	if c.Spot != nil && !slices.Contains([]string{"", TerminationDelete, TerminationStop}, c.Spot.InstanceTerminationAction) {
		bad("spot.instanceTerminationAction", "%q is not DELETE or STOP", c.Spot.InstanceTerminationAction)
	}
	if c.ServiceAccount != "" && !serviceAcct.MatchString(c.ServiceAccount) {
		bad("serviceAccount", "%q is not a service account email", c.ServiceAccount)
	}
	if strings.ContainsAny(c.CredentialsFile, "\x00\r\n") {
		bad("credentialsFile", "is not a file path")
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			bad("endpoint", "%q is not an http(s) URL without credentials", c.Endpoint)
		}
	}
	if c.Firewall.Manage == nil || *c.Firewall.Manage {
		if len(c.Firewall.SourceRanges) == 0 {
			bad("firewall.sourceRanges", "is required while egressd manages the rule (your crawlers' and probers' addresses), or set firewall.manage: false")
		}
	}
	for i, r := range c.Firewall.SourceRanges {
		if _, err := netip.ParsePrefix(r); err != nil {
			bad(fmt.Sprintf("firewall.sourceRanges[%d]", i), "%q is not a CIDR range", r)
		}
	}
	for _, b := range []struct {
		key string
		d   Duration
	}{{"call", c.Budgets.Call}, {"delete", c.Budgets.Delete}} {
		if b.d < 0 {
			bad("budgets."+b.key, "must not be negative, got %s", time.Duration(b.d))
		}
	}
	return errors.Join(errs...)
}

// checkImage allows relative references and https URLs of compute/v1.
func checkImage(img string) error {
	rel := img
	if strings.HasPrefix(img, "https://") {
		var ok bool
		if rel, ok = strings.CutPrefix(img, selfLinkBase); !ok {
			return fmt.Errorf("%q is not a %s... URL", img, selfLinkBase)
		}
	}
	if !imageRef.MatchString(rel) {
		return fmt.Errorf("%q is not projects/P/global/images/NAME or projects/P/global/images/family/FAMILY", img)
	}
	return nil
}

// selfLinkBase is how Compute Engine URLs start.
const selfLinkBase = "https://www.googleapis.com/compute/v1/"

// settings is the config with every default applied, as the provider uses it.
type settings struct {
	Config
	manageFirewall bool
	termination    string
	call, delete   time.Duration
}

func (c Config) settings() settings {
	s := settings{Config: c}
	s.Zones = slices.Clone(c.Zones)
	for i := range s.Zones {
		if s.Zones[i].MaxConcurrentOps == 0 {
			s.Zones[i].MaxConcurrentOps = DefaultMaxConcurrentOps
		}
	}
	if s.Network == "" {
		s.Network = DefaultNetwork
	}
	if s.DiskSizeGb == 0 {
		s.DiskSizeGb = DefaultDiskSizeGb
	}
	if s.ExternalIP == "" {
		s.ExternalIP = ExternalIPEphemeral
	}
	if c.Spot != nil {
		s.termination = c.Spot.InstanceTerminationAction
		if s.termination == "" {
			s.termination = TerminationDelete
		}
	}
	s.manageFirewall = c.Firewall.Manage == nil || *c.Firewall.Manage
	s.call = orDefault(c.Budgets.Call, defaultCall)
	s.delete = orDefault(c.Budgets.Delete, defaultDelete)
	return s
}

func orDefault(d Duration, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}
