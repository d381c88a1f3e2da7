package libvirt

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/providers"
)

// Config configures a libvirt provider. Its JSON and YAML names are the keys of the
// `libvirt:` block of egressd's config (yaml.v3 decodes it as is, strictly); errors from
// Validate name the key as the YAML spells it, e.g. `hosts[1].address`.
type Config struct {
	// SSHKeyFile is the private key (OpenSSH or PEM, no passphrase) egressd logs in with. It
	// is read on every dial, so a rotated key needs no restart.
	SSHKeyFile string `json:"sshKeyFile" yaml:"sshKeyFile"`
	// KnownHostsFile pins the hosts' keys (OpenSSH known_hosts format, for the exact
	// `address` dialled). Read on every dial. Required unless InsecureIgnoreHostKey.
	KnownHostsFile string `json:"knownHostsFile,omitempty" yaml:"knownHostsFile,omitempty"`
	// InsecureIgnoreHostKey accepts any host key. For throw-away labs only; New warns.
	InsecureIgnoreHostKey bool `json:"insecureIgnoreHostKey,omitempty" yaml:"insecureIgnoreHostKey,omitempty"`

	// Hosts are the libvirt hosts, in the order Check and List visit them.
	Hosts []HostConfig `json:"hosts" yaml:"hosts"`
	// Images are the base images placement.image may name, by key.
	Images map[string]ImageConfig `json:"images" yaml:"images"`
	// MachineTypes are the sizes placement.machineType may name, by key.
	MachineTypes map[string]MachineType `json:"machineTypes" yaml:"machineTypes"`

	// DiskSizeGb is each instance's disk, in GiB (at least the image's virtual size). Default 10.
	DiskSizeGb int `json:"diskSizeGb,omitempty" yaml:"diskSizeGb,omitempty"`
	// InstallGuestAgent puts a vendor-data script in the seed that installs and starts
	// qemu-guest-agent, which tells the host the guest's address. Default true.
	InstallGuestAgent *bool `json:"installGuestAgent,omitempty" yaml:"installGuestAgent,omitempty"`
	// VendorData is an extra cloud-init vendor-data document for every instance.
	VendorData string `json:"vendorData,omitempty" yaml:"vendorData,omitempty"`
	// DomainType is the libvirt domain type: kvm (default) or qemu (TCG, for hosts without
	// usable KVM).
	DomainType string `json:"domainType,omitempty" yaml:"domainType,omitempty"`
	// PoolReservePercent of a pool's capacity is never planned for: libvirt counts the
	// file system's root reserve as available, which QEMU cannot write to. Default 5.
	PoolReservePercent *int `json:"poolReservePercent,omitempty" yaml:"poolReservePercent,omitempty"`
	// DownloadDir is where base images are downloaded and verified before they are uploaded
	// to a host. Default: the system temp dir.
	DownloadDir string `json:"downloadDir,omitempty" yaml:"downloadDir,omitempty"`
	// Budgets bound each kind of call; zero fields take their defaults.
	Budgets Budgets `json:"budgets,omitempty" yaml:"budgets,omitempty"`
}

// HostConfig is one libvirt host, reached over SSH.
type HostConfig struct {
	// Name is the host's name in placement.zone, the catalog and instance IDs. A DNS label.
	Name string `json:"name" yaml:"name"`
	// Address is the SSH server's host:port.
	Address string `json:"address" yaml:"address"`
	// User is the SSH user; it must be allowed to use the libvirt socket (group libvirt).
	User string `json:"user" yaml:"user"`
	// Socket is libvirtd's unix socket on the host. Default /var/run/libvirt/libvirt-sock.
	Socket string `json:"socket,omitempty" yaml:"socket,omitempty"`
	// Pool is the storage pool for images, disks and seeds. Default "default".
	Pool string `json:"pool,omitempty" yaml:"pool,omitempty"`
	// Network is the libvirt network instances join; its DHCP leases also give their
	// addresses. Exactly one of Network and Bridge.
	Network string `json:"network,omitempty" yaml:"network,omitempty"`
	// Bridge is a host bridge instances join; addresses then come from the guest agent only.
	Bridge string `json:"bridge,omitempty" yaml:"bridge,omitempty"`
	// MaxConcurrentOps is how many ops may run on this host at once. Default 2.
	MaxConcurrentOps int `json:"maxConcurrentOps,omitempty" yaml:"maxConcurrentOps,omitempty"`
}

// ImageConfig is a base image every instance's disk is an overlay of.
type ImageConfig struct {
	// URL is where the image is downloaded from, http or https. Plain http needs SHA256.
	URL string `json:"url" yaml:"url"`
	// SHA256 is the image's digest, checked before it is uploaded to a host. Without it the
	// digest of the first download is pinned per host.
	SHA256 string `json:"sha256,omitempty" yaml:"sha256,omitempty"`
	// Format is the image's disk format: qcow2 (default) or raw.
	Format string `json:"format,omitempty" yaml:"format,omitempty"`
	// Firmware is uefi (default; OVMF, secure boot off) or bios.
	Firmware string `json:"firmware,omitempty" yaml:"firmware,omitempty"`
}

// MachineType is a size: placement.machineType names one.
type MachineType struct {
	VCPUs     int `json:"vcpus" yaml:"vcpus"`
	MemoryMiB int `json:"memoryMiB" yaml:"memoryMiB"`
}

// Budgets bound each kind of backend call; a call also ends with its caller's context.
type Budgets struct {
	// Dial bounds TCP connect, SSH handshake and libvirt connect together. Default 10s.
	Dial Duration `json:"dial,omitempty" yaml:"dial,omitempty"`
	// RPC bounds one ordinary libvirt call. Default 30s.
	RPC Duration `json:"rpc,omitempty" yaml:"rpc,omitempty"`
	// Start bounds DomainCreate. Default 90s.
	Start Duration `json:"start,omitempty" yaml:"start,omitempty"`
	// Running bounds the wait for a started domain to report running. Default 15s.
	Running Duration `json:"running,omitempty" yaml:"running,omitempty"`
	// Upload bounds a small upload (seed ISO, digest marker). Default 60s.
	Upload Duration `json:"upload,omitempty" yaml:"upload,omitempty"`
	// Transfer bounds fetching one base image and uploading it to a host. Default 20m.
	Transfer Duration `json:"transfer,omitempty" yaml:"transfer,omitempty"`
	// Lock bounds waiting for another Create or Delete of the same instance. Default 30s.
	Lock Duration `json:"lock,omitempty" yaml:"lock,omitempty"`
	// Keepalive is the SSH keepalive interval; a link whose keepalive gets no answer within
	// another interval is closed. Default 15s.
	Keepalive Duration `json:"keepalive,omitempty" yaml:"keepalive,omitempty"`
}

// Duration is providers.Duration: a Go duration string ("30s") in JSON and YAML.
type Duration = providers.Duration

// Defaults of the optional keys.
const (
	DefaultSocket           = "/var/run/libvirt/libvirt-sock"
	DefaultPool             = "default"
	DefaultMaxConcurrentOps = 2
	DefaultDiskSizeGb       = 10
	DefaultPoolReserve      = 5

	maxDiskSizeGb   = 16 << 10 // 16 TiB: past this a typo is likelier than a need
	maxVCPUs        = 512
	maxMemoryMiB    = 4 << 20 // 4 TiB
	maxVendorData   = 64 << 10
	formatQCOW2     = "qcow2"
	formatRaw       = "raw"
	firmwareUEFI    = "uefi"
	firmwareBIOS    = "bios"
	domainTypeKVM   = "kvm"
	domainTypeQEMU  = "qemu"
	defaultDial     = 10 * time.Second
	defaultRPC      = 30 * time.Second
	defaultStart    = 90 * time.Second
	defaultRunning  = 15 * time.Second
	defaultUpload   = 60 * time.Second
	defaultTransfer = 20 * time.Minute
	defaultLock     = 30 * time.Second
	defaultKeepNap  = 15 * time.Second
)

var (
	// poolName keeps libvirt object names free of separators and spaces.
	poolName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:+-]*$`)
	hexSHA   = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

// Validate checks the config. Every problem is reported, each naming its key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.SSHKeyFile == "" {
		bad("sshKeyFile", "is required")
	}
	switch {
	case c.KnownHostsFile == "" && !c.InsecureIgnoreHostKey:
		bad("knownHostsFile", "is required (or set insecureIgnoreHostKey, for throw-away labs only)")
	case c.KnownHostsFile != "" && c.InsecureIgnoreHostKey:
		bad("insecureIgnoreHostKey", "cannot be set together with knownHostsFile")
	}
	if len(c.Hosts) == 0 {
		bad("hosts", "at least one host is required")
	}
	seen := map[string]bool{}
	for i, h := range c.Hosts {
		at := fmt.Sprintf("hosts[%d]", i)
		switch {
		case !providers.ValidName(h.Name):
			bad(at+".name", "%q is not a DNS-1123 label (lowercase letters, digits and '-', at most 63)", h.Name)
		case seen[h.Name]:
			bad(at+".name", "duplicate host name %q", h.Name)
		}
		seen[h.Name] = true
		if err := checkAddress(h.Address); err != nil {
			bad(at+".address", "%v", err)
		}
		if h.User == "" || strings.ContainsAny(h.User, " \t\r\n@:") {
			bad(at+".user", "is required and holds no spaces, '@' or ':'")
		}
		if h.Socket != "" && !path.IsAbs(h.Socket) {
			bad(at+".socket", "%q is not an absolute path", h.Socket)
		}
		if h.Pool != "" && !poolName.MatchString(h.Pool) {
			bad(at+".pool", "%q is not a storage pool name", h.Pool)
		}
		switch {
		case (h.Network == "") == (h.Bridge == ""):
			bad(at+".network", "exactly one of network and bridge is required")
		case h.Network != "" && !poolName.MatchString(h.Network):
			bad(at+".network", "%q is not a libvirt network name", h.Network)
		case h.Bridge != "" && !poolName.MatchString(h.Bridge):
			bad(at+".bridge", "%q is not a bridge name", h.Bridge)
		}
		if h.MaxConcurrentOps < 0 {
			bad(at+".maxConcurrentOps", "must not be negative, got %d", h.MaxConcurrentOps)
		}
	}
	if len(c.Images) == 0 {
		bad("images", "at least one image is required")
	}
	for _, key := range sortedKeys(c.Images) {
		img, at := c.Images[key], "images."+key
		if !providers.ValidKey(key) {
			bad(at, "the key is not an identifier (letters, digits, '_', '.', '-'; at most 63)")
		}
		if err := checkImageURL(img); err != nil {
			bad(at+".url", "%v", err)
		}
		if img.SHA256 != "" && !hexSHA.MatchString(img.SHA256) {
			bad(at+".sha256", "is not 64 hex digits")
		}
		if !slices.Contains([]string{"", formatQCOW2, formatRaw}, img.Format) {
			bad(at+".format", "%q is not qcow2 or raw", img.Format)
		}
		if !slices.Contains([]string{"", firmwareUEFI, firmwareBIOS}, img.Firmware) {
			bad(at+".firmware", "%q is not uefi or bios", img.Firmware)
		}
	}
	if len(c.MachineTypes) == 0 {
		bad("machineTypes", "at least one machine type is required")
	}
	for _, key := range sortedKeys(c.MachineTypes) {
		mt, at := c.MachineTypes[key], "machineTypes."+key
		if !providers.ValidKey(key) {
			bad(at, "the key is not an identifier (letters, digits, '_', '.', '-'; at most 63)")
		}
		if mt.VCPUs < 1 || mt.VCPUs > maxVCPUs {
			bad(at+".vcpus", "must be between 1 and %d, got %d", maxVCPUs, mt.VCPUs)
		}
		if mt.MemoryMiB < 64 || mt.MemoryMiB > maxMemoryMiB {
			bad(at+".memoryMiB", "must be between 64 and %d, got %d", maxMemoryMiB, mt.MemoryMiB)
		}
	}
	if c.DiskSizeGb < 0 || c.DiskSizeGb > maxDiskSizeGb {
		bad("diskSizeGb", "must be between 0 (default %d) and %d, got %d", DefaultDiskSizeGb, maxDiskSizeGb, c.DiskSizeGb)
	}
	if len(c.VendorData) > maxVendorData {
		bad("vendorData", "is %d bytes, at most %d", len(c.VendorData), maxVendorData)
	}
	if !slices.Contains([]string{"", domainTypeKVM, domainTypeQEMU}, c.DomainType) {
		bad("domainType", "%q is not kvm or qemu", c.DomainType)
	}
	if r := c.PoolReservePercent; r != nil && (*r < 0 || *r > 50) {
		bad("poolReservePercent", "must be between 0 and 50, got %d", *r)
	}
	for _, b := range []struct {
		key string
		d   Duration
	}{
		{"dial", c.Budgets.Dial}, {"rpc", c.Budgets.RPC}, {"start", c.Budgets.Start},
		{"running", c.Budgets.Running}, {"upload", c.Budgets.Upload}, {"transfer", c.Budgets.Transfer},
		{"lock", c.Budgets.Lock}, {"keepalive", c.Budgets.Keepalive},
	} {
		if b.d < 0 {
			bad("budgets."+b.key, "must not be negative, got %s", time.Duration(b.d))
		}
	}
	return errors.Join(errs...)
}

func checkAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q has no port between 1 and 65535", addr)
	}
	return nil
}

// checkImageURL allows http(s) only, and plain http only with a digest: an unverified image
// fetched in clear would run whatever a network path put in it.
func checkImageURL(img ImageConfig) error {
	u, err := url.Parse(img.URL)
	switch {
	case img.URL == "":
		return errors.New("is required")
	case err != nil || u.Host == "":
		return errors.New("is not an absolute http(s) URL")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && img.SHA256 == "":
		return errors.New("a plain http URL needs sha256")
	case u.Scheme == "http":
		return nil
	}
	return fmt.Errorf("scheme %q is not http or https", u.Scheme)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// settings is the config with every default applied, as the provider uses it.
type settings struct {
	Config
	diskBytes       uint64
	reservePercent  uint64
	installAgent    bool
	dial, rpc       time.Duration
	start, running  time.Duration
	upload, xfer    time.Duration
	lock, keepalive time.Duration
}

func (c Config) settings() settings {
	s := settings{Config: c}
	s.Hosts = slices.Clone(c.Hosts)
	for i := range s.Hosts {
		h := &s.Hosts[i]
		h.Socket = orString(h.Socket, DefaultSocket)
		h.Pool = orString(h.Pool, DefaultPool)
		if h.MaxConcurrentOps == 0 {
			h.MaxConcurrentOps = DefaultMaxConcurrentOps
		}
	}
	s.Images = make(map[string]ImageConfig, len(c.Images))
	for k, img := range c.Images {
		img.Format = orString(img.Format, formatQCOW2)
		img.Firmware = orString(img.Firmware, firmwareUEFI)
		img.SHA256 = strings.ToLower(img.SHA256)
		s.Images[k] = img
	}
	s.DomainType = orString(c.DomainType, domainTypeKVM)
	gb := c.DiskSizeGb
	if gb == 0 {
		gb = DefaultDiskSizeGb
	}
	s.diskBytes = uint64(gb) << 30
	s.reservePercent = DefaultPoolReserve
	if c.PoolReservePercent != nil {
		s.reservePercent = uint64(*c.PoolReservePercent)
	}
	s.installAgent = c.InstallGuestAgent == nil || *c.InstallGuestAgent
	b := c.Budgets
	s.dial = orDefault(b.Dial, defaultDial)
	s.rpc = orDefault(b.RPC, defaultRPC)
	s.start = orDefault(b.Start, defaultStart)
	s.running = orDefault(b.Running, defaultRunning)
	s.upload = orDefault(b.Upload, defaultUpload)
	s.xfer = orDefault(b.Transfer, defaultTransfer)
	s.lock = orDefault(b.Lock, defaultLock)
	s.keepalive = orDefault(b.Keepalive, defaultKeepNap)
	return s
}

func orString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func orDefault(d Duration, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}
