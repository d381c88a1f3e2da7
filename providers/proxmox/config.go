package proxmox

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/egressd/egressd/providers"
)

// Config configures a proxmox provider. Its JSON and YAML names are the keys of the
// `proxmox:` block of egressd's config (decoded strictly); errors from Validate name the key
// as the YAML spells it, e.g. `nodes[1].name`.
type Config struct {
	// URL is the API's base, https://<host>:8006 (the path /api2/json is added). Plain http
	// only for tests against a simulator.
	URL string `json:"url" yaml:"url"`
	// TokenFile holds the API token as PVE's header wants it after "PVEAPIToken=":
	// <user>@<realm>!<tokenid>=<secret>. It is read on every request, so a rotated token needs
	// no restart.
	TokenFile string `json:"tokenFile" yaml:"tokenFile"`
	// CAFile is a PEM bundle the API's certificate must chain to. Default: the system roots.
	CAFile string `json:"caFile,omitempty" yaml:"caFile,omitempty"`
	// InsecureSkipTLSVerify accepts any certificate. For throw-away labs only; New warns.
	InsecureSkipTLSVerify bool `json:"insecureSkipTLSVerify,omitempty" yaml:"insecureSkipTLSVerify,omitempty"`

	// Nodes are the PVE nodes proxies run on: the catalog's hosts, in the order Check visits
	// them.
	Nodes []NodeConfig `json:"nodes" yaml:"nodes"`
	// Storage is where full clones put their disks. Default: the template's storage.
	Storage string `json:"storage,omitempty" yaml:"storage,omitempty"`
	// ISOStorage is the storage seed ISOs are uploaded to; it must hold content "iso" and be
	// reachable from every node. Default "local".
	ISOStorage string `json:"isoStorage,omitempty" yaml:"isoStorage,omitempty"`
	// Bridge replaces the bridge of the template's net0. Default: the template's.
	Bridge string `json:"bridge,omitempty" yaml:"bridge,omitempty"`
	// VLANTag tags net0 (1–4094). Default: the template's (usually none).
	VLANTag int `json:"vlanTag,omitempty" yaml:"vlanTag,omitempty"`
	// VMIDRange is where VMIDs are allocated. Default 100000–199999.
	VMIDRange *VMIDRange `json:"vmidRange,omitempty" yaml:"vmidRange,omitempty"`
	// Templates are the VM templates placement.image may name, by key.
	Templates map[string]TemplateConfig `json:"templates" yaml:"templates"`
	// MachineTypes are the sizes placement.machineType may name, by key.
	MachineTypes map[string]MachineType `json:"machineTypes" yaml:"machineTypes"`
	// RequestTimeoutSeconds bounds one API request (0: the default, 30).
	RequestTimeoutSeconds int `json:"requestTimeoutSeconds,omitempty" yaml:"requestTimeoutSeconds,omitempty"`
	// VendorData is an extra cloud-init vendor-data document for every instance.
	VendorData string `json:"vendorData,omitempty" yaml:"vendorData,omitempty"`
	// InstallGuestAgent puts a vendor-data script in the seed that installs and starts
	// qemu-guest-agent. Default true; a template with the agent baked in does not need it.
	InstallGuestAgent *bool `json:"installGuestAgent,omitempty" yaml:"installGuestAgent,omitempty"`
}

// NodeConfig is one PVE node.
type NodeConfig struct {
	// Name is the node's name as PVE knows it (placement.zone, the catalog, instance hosts).
	Name string `json:"name" yaml:"name"`
	// MaxConcurrentOps is how many ops may run on this node at once, and how many clones
	// into one storage of it. Default 2.
	MaxConcurrentOps int `json:"maxConcurrentOps,omitempty" yaml:"maxConcurrentOps,omitempty"`
}

// VMIDRange bounds the VMIDs egressd allocates (inclusive).
type VMIDRange struct {
	Min int `json:"min" yaml:"min"`
	Max int `json:"max" yaml:"max"`
}

// TemplateConfig is a PVE VM template instances are cloned from.
type TemplateConfig struct {
	// VMID is the template's VMID (≥100); its node is found in the cluster's resources.
	VMID int `json:"vmid" yaml:"vmid"`
	// FullClone copies the disks even where a linked clone would do. Default false: a linked
	// clone when the template is a template, storage is unset or its own, and the target node
	// is its node.
	FullClone bool `json:"fullClone,omitempty" yaml:"fullClone,omitempty"`
}

// MachineType is a size: placement.machineType names one.
type MachineType struct {
	Cores     int `json:"cores" yaml:"cores"`
	MemoryMiB int `json:"memoryMiB" yaml:"memoryMiB"`
	// DiskGiB grows the boot disk to this size when it is smaller; 0 keeps the template's.
	DiskGiB int `json:"diskGiB,omitempty" yaml:"diskGiB,omitempty"`
}

// Defaults and bounds.
const (
	DefaultISOStorage       = "local"
	DefaultMaxConcurrentOps = 2
	DefaultVMIDMin          = 100000
	DefaultVMIDMax          = 199999
	defaultRequestTimeout   = 30 * time.Second

	minVMID       = 100
	maxVMID       = 999999999
	maxCores      = 512
	maxMemoryMiB  = 4 << 20
	maxDiskGiB    = 64 << 10
	maxVendorData = 64 << 10
	maxTimeout    = 3600
)

var (
	storageName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)
	bridgeName  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)
)

// Validate checks the config. Every problem is reported, each naming its key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if u, err := url.Parse(c.URL); c.URL == "" {
		bad("url", "is required (https://<host>:8006)")
	} else if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil || u.RawQuery != "" {
		bad("url", "%q is not an http(s) URL with a host and no credentials or query", c.URL)
	}
	if c.TokenFile == "" {
		bad("tokenFile", "is required")
	}
	if c.CAFile != "" && c.InsecureSkipTLSVerify {
		bad("insecureSkipTLSVerify", "cannot be set together with caFile")
	}
	if len(c.Nodes) == 0 {
		bad("nodes", "at least one node is required")
	}
	seen := map[string]bool{}
	for i, n := range c.Nodes {
		at := fmt.Sprintf("nodes[%d]", i)
		switch {
		case !providers.ValidName(n.Name):
			bad(at+".name", "%q is not a node name (lowercase letters, digits and '-', at most 63)", n.Name)
		case seen[n.Name]:
			bad(at+".name", "duplicate node name %q", n.Name)
		}
		seen[n.Name] = true
		if n.MaxConcurrentOps < 0 {
			bad(at+".maxConcurrentOps", "must not be negative, got %d", n.MaxConcurrentOps)
		}
	}
	if c.Storage != "" && !storageName.MatchString(c.Storage) {
		bad("storage", "%q is not a storage ID", c.Storage)
	}
	if c.ISOStorage != "" && !storageName.MatchString(c.ISOStorage) {
		bad("isoStorage", "%q is not a storage ID", c.ISOStorage)
	}
	if c.Bridge != "" && !bridgeName.MatchString(c.Bridge) {
		bad("bridge", "%q is not a bridge name", c.Bridge)
	}
	if c.VLANTag != 0 && (c.VLANTag < 1 || c.VLANTag > 4094) {
		bad("vlanTag", "must be between 1 and 4094, got %d", c.VLANTag)
	}
	if r := c.VMIDRange; r != nil {
		switch {
		case r.Min < minVMID:
			bad("vmidRange.min", "must be at least %d, got %d", minVMID, r.Min)
		case r.Max > maxVMID:
			bad("vmidRange.max", "must be at most %d, got %d", maxVMID, r.Max)
		case r.Min >= r.Max:
			bad("vmidRange", "min %d must be below max %d", r.Min, r.Max)
		}
	}
	if len(c.Templates) == 0 {
		bad("templates", "at least one template is required")
	}
	vmids := map[int]string{}
	for _, key := range slices.Sorted(maps.Keys(c.Templates)) {
		t, at := c.Templates[key], "templates."+key
		if !providers.ValidKey(key) {
			bad(at, "the key is not an identifier (letters, digits, '_', '.', '-'; at most 63)")
		}
		switch {
		case t.VMID < minVMID || t.VMID > maxVMID:
			bad(at+".vmid", "must be between %d and %d, got %d", minVMID, maxVMID, t.VMID)
		case vmids[t.VMID] != "":
			bad(at+".vmid", "%d is also templates.%s", t.VMID, vmids[t.VMID])
		}
		vmids[t.VMID] = key
		if lo, hi := c.vmidRange(); t.VMID >= lo && t.VMID <= hi {
			bad(at+".vmid", "%d lies inside vmidRange %d–%d, where egressd allocates", t.VMID, lo, hi)
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
		if mt.Cores < 1 || mt.Cores > maxCores {
			bad(at+".cores", "must be between 1 and %d, got %d", maxCores, mt.Cores)
		}
		if mt.MemoryMiB < 16 || mt.MemoryMiB > maxMemoryMiB {
			bad(at+".memoryMiB", "must be between 16 and %d, got %d", maxMemoryMiB, mt.MemoryMiB)
		}
		if mt.DiskGiB < 0 || mt.DiskGiB > maxDiskGiB {
			bad(at+".diskGiB", "must be between 0 (keep the template's) and %d, got %d", maxDiskGiB, mt.DiskGiB)
		}
	}
	if c.RequestTimeoutSeconds < 0 || c.RequestTimeoutSeconds > maxTimeout {
		bad("requestTimeoutSeconds", "must be between 0 (default 30) and %d, got %d", maxTimeout, c.RequestTimeoutSeconds)
	}
	if len(c.VendorData) > maxVendorData {
		bad("vendorData", "is %d bytes, at most %d", len(c.VendorData), maxVendorData)
	}
	return errors.Join(errs...)
}

func (c Config) vmidRange() (int, int) {
	if c.VMIDRange == nil {
		return DefaultVMIDMin, DefaultVMIDMax
	}
	return c.VMIDRange.Min, c.VMIDRange.Max
}

// settings is the config with every default applied, as the provider uses it.
type settings struct {
	Config
	vmidMin, vmidMax int
	requestTimeout   time.Duration
	installAgent     bool
	maxOps           map[string]int // by node
}

func (c Config) settings() settings {
	s := settings{Config: c, maxOps: map[string]int{}}
	s.Nodes = slices.Clone(c.Nodes)
	for i := range s.Nodes {
		if s.Nodes[i].MaxConcurrentOps == 0 {
			s.Nodes[i].MaxConcurrentOps = DefaultMaxConcurrentOps
		}
		s.maxOps[s.Nodes[i].Name] = s.Nodes[i].MaxConcurrentOps
	}
	if s.ISOStorage == "" {
		s.ISOStorage = DefaultISOStorage
	}
	s.vmidMin, s.vmidMax = c.vmidRange()
	s.requestTimeout = defaultRequestTimeout
	if c.RequestTimeoutSeconds > 0 {
		s.requestTimeout = time.Duration(c.RequestTimeoutSeconds) * time.Second
	}
	s.installAgent = c.InstallGuestAgent == nil || *c.InstallGuestAgent
	return s
}
