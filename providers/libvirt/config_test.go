package libvirt

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/egressd/egressd/providers/providertest"
)

func validConfig() Config {
	return Config{
		SSHKeyFile:     "/etc/egressd/id_ed25519",
		KnownHostsFile: "/etc/egressd/known_hosts",
		Hosts:          []HostConfig{{Name: "kvm1", Address: "kvm1.example:22", User: "egressd", Network: "default"}},
		Images:         map[string]ImageConfig{"debian-13": {URL: "https://images.example/debian-13.qcow2"}},
		MachineTypes:   map[string]MachineType{"small": {VCPUs: 1, MemoryMiB: 512}},
	}
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, c := range []struct {
		key    string
		mutate func(*Config)
	}{
		{"sshKeyFile", func(c *Config) { c.SSHKeyFile = "" }},
		{"knownHostsFile", func(c *Config) { c.KnownHostsFile = "" }},
		{"insecureIgnoreHostKey", func(c *Config) { c.InsecureIgnoreHostKey = true }},
		{"hosts", func(c *Config) { c.Hosts = nil }},
		{"hosts[0].name", func(c *Config) { c.Hosts[0].Name = "KVM_1" }},
		{"hosts[1].name", func(c *Config) { c.Hosts = append(c.Hosts, c.Hosts[0]) }},
		{"hosts[0].address", func(c *Config) { c.Hosts[0].Address = "kvm1.example" }},
		{"hosts[0].address", func(c *Config) { c.Hosts[0].Address = "kvm1.example:0" }},
		{"hosts[0].user", func(c *Config) { c.Hosts[0].User = "" }},
		{"hosts[0].socket", func(c *Config) { c.Hosts[0].Socket = "libvirt-sock" }},
		{"hosts[0].pool", func(c *Config) { c.Hosts[0].Pool = "a/b" }},
		{"hosts[0].network", func(c *Config) { c.Hosts[0].Bridge = "br0" }},
		{"hosts[0].network", func(c *Config) { c.Hosts[0].Network = "" }},
		{"hosts[0].maxConcurrentOps", func(c *Config) { c.Hosts[0].MaxConcurrentOps = -1 }},
		{"images", func(c *Config) { c.Images = nil }},
		{"images.a/b", func(c *Config) { c.Images["a/b"] = c.Images["debian-13"] }},
		{"images.debian-13.url", func(c *Config) { c.Images["debian-13"] = ImageConfig{URL: "ftp://x/y"} }},
		{"images.debian-13.url", func(c *Config) { c.Images["debian-13"] = ImageConfig{URL: "http://x/y"} }},
		{"images.debian-13.sha256", func(c *Config) { c.Images["debian-13"] = ImageConfig{URL: "https://x/y", SHA256: "abc"} }},
		{"images.debian-13.format", func(c *Config) { c.Images["debian-13"] = ImageConfig{URL: "https://x/y", Format: "vmdk"} }},
		{"images.debian-13.firmware", func(c *Config) { c.Images["debian-13"] = ImageConfig{URL: "https://x/y", Firmware: "coreboot"} }},
		{"machineTypes", func(c *Config) { c.MachineTypes = nil }},
		{"machineTypes.small.vcpus", func(c *Config) { c.MachineTypes["small"] = MachineType{MemoryMiB: 512} }},
		{"machineTypes.small.memoryMiB", func(c *Config) { c.MachineTypes["small"] = MachineType{VCPUs: 1, MemoryMiB: 1} }},
		{"machineTypes.../x", func(c *Config) { c.MachineTypes["../x"] = c.MachineTypes["small"] }},
		{"diskSizeGb", func(c *Config) { c.DiskSizeGb = -1 }},
		{"vendorData", func(c *Config) { c.VendorData = strings.Repeat("x", maxVendorData+1) }},
		{"domainType", func(c *Config) { c.DomainType = "xen" }},
		{"poolReservePercent", func(c *Config) { r := 90; c.PoolReservePercent = &r }},
		{"budgets.rpc", func(c *Config) { c.Budgets.RPC = Duration(-time.Second) }},
	} {
		cfg := validConfig()
		c.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.key+":") {
			t.Errorf("%s: Validate() = %v, want an error naming %s", c.key, err, c.key)
		}
	}
	http := validConfig()
	http.Images["debian-13"] = ImageConfig{URL: "http://mirror/x.qcow2", SHA256: strings.Repeat("A", 64)}
	if err := http.Validate(); err != nil {
		t.Errorf("plain http with a digest: %v", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	s := validConfig().settings()
	h := s.Hosts[0]
	if h.Socket != DefaultSocket || h.Pool != "default" || h.MaxConcurrentOps != 2 {
		t.Errorf("host defaults %+v", h)
	}
	img := s.Images["debian-13"]
	if img.Format != "qcow2" || img.Firmware != "uefi" {
		t.Errorf("image defaults %+v", img)
	}
	if s.DomainType != "kvm" || s.diskBytes != 10<<30 || !s.installAgent || s.reservePercent != 5 {
		t.Errorf("defaults %+v", s)
	}
	if s.dial != 10*time.Second || s.rpc != 30*time.Second || s.start != 90*time.Second || s.upload != time.Minute ||
		s.xfer != 20*time.Minute || s.running != 15*time.Second || s.keepalive != 15*time.Second {
		t.Errorf("budget defaults %+v", s)
	}
}

// The lead's YAML block has exactly these JSON keys; durations are Go duration strings.
func TestConfigJSON(t *testing.T) {
	raw := `{"sshKeyFile":"/k","knownHostsFile":"/kh","hosts":[{"name":"kvm1","address":"10.0.0.1:22","user":"u","socket":"/s","pool":"p","bridge":"br0","maxConcurrentOps":3}],
	"images":{"d":{"url":"https://x/d.qcow2","sha256":"","format":"qcow2","firmware":"bios"}},"machineTypes":{"s":{"vcpus":1,"memoryMiB":256}},
	"diskSizeGb":20,"installGuestAgent":false,"vendorData":"#cloud-config\n","domainType":"qemu","poolReservePercent":0,"downloadDir":"/var/tmp",
	"budgets":{"dial":"5s","rpc":"20s","start":"1m","running":"30s","upload":"2m","transfer":"30m","lock":"10s","keepalive":"10s"}}`
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := cfg.settings()
	if s.installAgent || s.reservePercent != 0 || s.xfer != 30*time.Minute || s.Hosts[0].MaxConcurrentOps != 3 {
		t.Errorf("decoded %+v", s)
	}
	if err := json.Unmarshal([]byte(`{"budgets":{"rpc":"soon"}}`), &cfg); err == nil {
		t.Error("a bad duration decoded")
	}
}

func TestNew(t *testing.T) {
	if _, err := New("Bad_Name", validConfig(), nil, Hooks{}); err == nil {
		t.Error("New accepted a provider name that is not a DNS label")
	}
	bad := validConfig()
	bad.Hosts[0].Address = ""
	if _, err := New("lv", bad, nil, Hooks{}); err == nil || !strings.Contains(err.Error(), "hosts[0].address") {
		t.Errorf("New with a bad config = %v", err)
	}
	var log providertest.LogBuffer
	insecure := validConfig()
	insecure.KnownHostsFile, insecure.InsecureIgnoreHostKey = "", true
	if _, err := New("lv", insecure, log.Logger(), Hooks{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "insecureIgnoreHostKey") || !strings.Contains(log.String(), "WARN") {
		t.Errorf("New did not warn about insecureIgnoreHostKey: %s", log.String())
	}
	p, err := New("lv", validConfig(), nil, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	cat := p.Catalog()
	if cat.Type != "libvirt" || len(cat.Hosts) != 1 || cat.Hosts[0].MaxConcurrentOps != 2 || cat.Images[0] != "debian-13" || cat.MachineTypes["small"].VCPUs != 1 {
		t.Errorf("catalog %+v", cat)
	}
	js, _ := json.Marshal(cat)
	for _, secret := range []string{"https://", "/etc/egressd", "egressd", "kvm1.example"} {
		if strings.Contains(string(js), secret) {
			t.Errorf("catalog holds %q: %s", secret, js)
		}
	}
}

// The sample config in deploy/ is a valid libvirt block, key for key.
func TestSampleConfig(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/libvirt.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Providers []struct {
			Type    string         `yaml:"type"`
			Libvirt map[string]any `yaml:"libvirt"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, p := range file.Providers {
		if p.Type != "libvirt" {
			continue
		}
		found++
		js, err := json.Marshal(p.Libvirt)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		var cfg Config
		if err := dec.Decode(&cfg); err != nil {
			t.Fatalf("sample libvirt block: %v", err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("sample libvirt block: %v", err)
		}
	}
	if found == 0 {
		t.Error("the sample has no libvirt provider")
	}

	// And yaml.v3 decodes it straight into Config, strictly, as cmd/egressd may.
	var strict struct {
		Version   int `yaml:"version"`
		Providers []struct {
			Name    string  `yaml:"name"`
			Type    string  `yaml:"type"`
			Libvirt *Config `yaml:"libvirt"`
		} `yaml:"providers"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&strict); err != nil {
		t.Fatalf("strict YAML decode into Config: %v", err)
	}
	for _, p := range strict.Providers {
		if p.Libvirt == nil {
			continue
		}
		if err := p.Libvirt.Validate(); err != nil {
			t.Errorf("YAML-decoded sample: %v", err)
		}
		if p.Libvirt.Budgets.Transfer != Duration(20*time.Minute) || p.Libvirt.MachineTypes["medium"].MemoryMiB != 2048 {
			t.Errorf("YAML-decoded sample: %+v", p.Libvirt)
		}
	}
}
