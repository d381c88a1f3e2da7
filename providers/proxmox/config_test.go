package proxmox

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func validConfig() Config {
	return Config{
		URL:          "https://pve.example:8006",
		TokenFile:    "/etc/egressd/proxmox/token",
		Nodes:        []NodeConfig{{Name: "pv1-1"}},
		Templates:    map[string]TemplateConfig{"debian": {VMID: 9001}},
		MachineTypes: map[string]MachineType{"small": {Cores: 1, MemoryMiB: 512}},
	}
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := []struct {
		key  string
		edit func(*Config)
	}{
		{"url:", func(c *Config) { c.URL = "" }},
		{"url:", func(c *Config) { c.URL = "ftp://pve:8006" }},
		{"url:", func(c *Config) { c.URL = "https://root:pw@pve:8006" }},
		{"tokenFile:", func(c *Config) { c.TokenFile = "" }},
		{"insecureSkipTLSVerify:", func(c *Config) { c.CAFile, c.InsecureSkipTLSVerify = "/ca.pem", true }},
		{"nodes:", func(c *Config) { c.Nodes = nil }},
		{"nodes[1].name:", func(c *Config) { c.Nodes = append(c.Nodes, NodeConfig{Name: "pv1-1"}) }},
		{"nodes[0].name:", func(c *Config) { c.Nodes[0].Name = "PV1" }},
		{"nodes[0].maxConcurrentOps:", func(c *Config) { c.Nodes[0].MaxConcurrentOps = -1 }},
		{"storage:", func(c *Config) { c.Storage = "1bad" }},
		{"isoStorage:", func(c *Config) { c.ISOStorage = "a/b" }},
		{"bridge:", func(c *Config) { c.Bridge = "vmbr0 x" }},
		{"vlanTag:", func(c *Config) { c.VLANTag = 4095 }},
		{"vmidRange.min:", func(c *Config) { c.VMIDRange = &VMIDRange{Min: 99, Max: 200} }},
		{"vmidRange.max:", func(c *Config) { c.VMIDRange = &VMIDRange{Min: 100, Max: 1000000000} }},
		{"vmidRange:", func(c *Config) { c.VMIDRange = &VMIDRange{Min: 500, Max: 500} }},
		{"templates:", func(c *Config) { c.Templates = nil }},
		{"templates.debian.vmid:", func(c *Config) { c.Templates["debian"] = TemplateConfig{VMID: 99} }},
		{"templates.debian.vmid:", func(c *Config) { c.Templates["debian"] = TemplateConfig{VMID: 150000} }},
		{"templates.debian.vmid: 9001 is also templates.b", func(c *Config) { c.Templates["b"] = TemplateConfig{VMID: 9001} }},
		{"templates.a b:", func(c *Config) { c.Templates["a b"] = TemplateConfig{VMID: 9002} }},
		{"machineTypes:", func(c *Config) { c.MachineTypes = nil }},
		{"machineTypes.small.cores:", func(c *Config) { c.MachineTypes["small"] = MachineType{MemoryMiB: 512} }},
		{"machineTypes.small.memoryMiB:", func(c *Config) { c.MachineTypes["small"] = MachineType{Cores: 1} }},
		{"machineTypes.small.diskGiB:", func(c *Config) { c.MachineTypes["small"] = MachineType{Cores: 1, MemoryMiB: 512, DiskGiB: -1} }},
		{"requestTimeoutSeconds:", func(c *Config) { c.RequestTimeoutSeconds = -1 }},
		{"vendorData:", func(c *Config) { c.VendorData = strings.Repeat("x", maxVendorData+1) }},
	}
	for _, c := range cases {
		cfg := validConfig()
		cfg.Templates = map[string]TemplateConfig{"debian": {VMID: 9001}}
		cfg.MachineTypes = map[string]MachineType{"small": {Cores: 1, MemoryMiB: 512}}
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("want an error naming %s, got %v", c.key, err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	s := validConfig().settings()
	if s.ISOStorage != "local" || s.vmidMin != 100000 || s.vmidMax != 199999 || s.requestTimeout.Seconds() != 30 ||
		!s.installAgent || s.Nodes[0].MaxConcurrentOps != 2 {
		t.Errorf("defaults: %+v", s)
	}
}

// The YAML/JSON keys are the documented ones (docs/providers/proxmox.md).
func TestConfigKeys(t *testing.T) {
	no := false
	cfg := validConfig()
	cfg.VMIDRange, cfg.InstallGuestAgent, cfg.VLANTag = &VMIDRange{Min: 200, Max: 300}, &no, 4
	b, _ := json.Marshal(cfg)
	for _, k := range []string{`"url"`, `"tokenFile"`, `"nodes"`, `"templates"`, `"machineTypes"`, `"vmidRange"`, `"vlanTag"`, `"installGuestAgent"`, `"memoryMiB"`, `"vmid"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("%s missing from %s", k, b)
		}
	}
}

// The sample in deploy/ is a valid config, decoded strictly as egressd's loader does.
func TestSampleConfigValidates(t *testing.T) {
	b, err := os.ReadFile("../../deploy/proxmox.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Providers []struct {
			Type    string    `yaml:"type"`
			Proxmox yaml.Node `yaml:"proxmox"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, pc := range doc.Providers {
		if pc.Type != "proxmox" {
			continue
		}
		found++
		var raw bytes.Buffer
		enc := yaml.NewEncoder(&raw)
		if err := enc.Encode(&pc.Proxmox); err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(&raw)
		dec.KnownFields(true)
		var cfg Config
		if err := dec.Decode(&cfg); err != nil {
			t.Fatalf("the sample's proxmox block: %v", err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("the sample's proxmox block: %v", err)
		}
	}
	if found != 1 {
		t.Errorf("%d proxmox providers in the sample", found)
	}
}
