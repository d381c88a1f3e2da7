package gcp

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/egressd/egressd/providers"
)

func validConfig() Config {
	return Config{
		Project:      "my-project-1",
		Zones:        []ZoneConfig{{Name: "us-central1-a", MaxConcurrentOps: 3}, {Name: "us-central1-b"}},
		MachineTypes: map[string]MachineType{"small": {Type: "e2-small"}},
		Images:       map[string]string{"debian": "projects/debian-cloud/global/images/family/debian-12"},
		Firewall:     FirewallConfig{SourceRanges: []string{"203.0.113.0/24"}},
	}
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	off := false
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string // the key the error names
	}{
		{"no project", func(c *Config) { c.Project = "" }, "project:"},
		{"bad project", func(c *Config) { c.Project = "My_Project" }, "project:"},
		{"no zones", func(c *Config) { c.Zones = nil }, "zones:"},
		{"bad zone", func(c *Config) { c.Zones[1].Name = "central" }, "zones[1].name:"},
		{"duplicate zone", func(c *Config) { c.Zones[1].Name = "us-central1-a" }, "zones[1].name:"},
		{"negative ops", func(c *Config) { c.Zones[0].MaxConcurrentOps = -1 }, "zones[0].maxConcurrentOps:"},
		{"no machine types", func(c *Config) { c.MachineTypes = nil }, "machineTypes:"},
		{"bad machine type", func(c *Config) { c.MachineTypes["small"] = MachineType{Type: "E2 Small"} }, "machineTypes.small.type:"},
		{"bad machine key", func(c *Config) { c.MachineTypes["a/b"] = MachineType{Type: "e2-small"} }, "machineTypes.a/b:"},
		{"no images", func(c *Config) { c.Images = nil }, "images:"},
		{"bad image", func(c *Config) { c.Images["debian"] = "debian-12" }, "images.debian:"},
		{"foreign image URL", func(c *Config) { c.Images["debian"] = "https://example.com/x" }, "images.debian:"},
		{"bad network", func(c *Config) { c.Network = "Default" }, "network:"},
		{"bad subnetwork", func(c *Config) { c.Subnetwork = "subnet-1" }, "subnetwork:"},
		{"bad tag", func(c *Config) { c.NetworkTags = []string{"ok", "Not OK"} }, "networkTags[1]:"},
		{"disk", func(c *Config) { c.DiskSizeGb = -1 }, "diskSizeGb:"},
		{"external IP", func(c *Config) { c.ExternalIP = "static" }, "externalIP:"},
		{"spot action", func(c *Config) { c.Spot = &SpotConfig{InstanceTerminationAction: "delete"} }, "spot.instanceTerminationAction:"},
		{"service account", func(c *Config) { c.ServiceAccount = "nobody" }, "serviceAccount:"},
		{"endpoint", func(c *Config) { c.Endpoint = "ftp://x" }, "endpoint:"},
		{"endpoint with user", func(c *Config) { c.Endpoint = "https://u:p@x" }, "endpoint:"},
		{"no source ranges", func(c *Config) { c.Firewall.SourceRanges = nil }, "firewall.sourceRanges:"},
		{"bad source range", func(c *Config) { c.Firewall.SourceRanges = []string{"10.0.0.0/8", "everyone"} }, "firewall.sourceRanges[1]:"},
		{"budget", func(c *Config) { c.Budgets.Call = -1 }, "budgets.call:"},
	} {
		cfg := validConfig()
		cfg.MachineTypes = map[string]MachineType{"small": {Type: "e2-small"}}
		cfg.Images = map[string]string{"debian": "projects/debian-cloud/global/images/family/debian-12"}
		cfg.Zones = []ZoneConfig{{Name: "us-central1-a", MaxConcurrentOps: 3}, {Name: "us-central1-b"}}
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
	}
	// Valid variations.
	cfg := validConfig()
	cfg.Firewall = FirewallConfig{Manage: &off}
	cfg.Subnetwork = "regions/us-central1/subnetworks/proxies"
	cfg.Images["img"] = "https://www.googleapis.com/compute/v1/projects/p-123456/global/images/my-image"
	cfg.Spot = &SpotConfig{}
	cfg.ExternalIP = ExternalIPNone
	cfg.ServiceAccount = "proxies@my-project-1.iam.gserviceaccount.com"
	cfg.Endpoint = "http://127.0.0.1:8080"
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid variations: %v", err)
	}
	s := cfg.settings()
	if s.termination != TerminationDelete || s.manageFirewall || s.Zones[1].MaxConcurrentOps != DefaultMaxConcurrentOps || s.Network != DefaultNetwork || s.DiskSizeGb != DefaultDiskSizeGb {
		t.Errorf("defaults: %+v", s)
	}
}

// Requests no backend could serve are refused before any call, naming the field.
func TestPlanRefusesBadRequests(t *testing.T) {
	p, err := New("gce", validConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	good := providers.CreateRequest{Name: providers.InstanceName("i", "u"), UID: "u", Installation: "i", Host: "us-central1-a", Port: 3128}
	if _, err := p.plan(good); err != nil {
		t.Fatalf("good request: %v", err)
	}
	for _, c := range []struct {
		edit func(*providers.CreateRequest)
		want string
	}{
		{func(r *providers.CreateRequest) { r.Name = "Bad_Name" }, "name"},
		{func(r *providers.CreateRequest) { r.UID = "Upper" }, "uid"},
		{func(r *providers.CreateRequest) { r.Installation = "" }, "installation"},
		{func(r *providers.CreateRequest) { r.Port = 70000 }, "port"},
		{func(r *providers.CreateRequest) { r.Host = "" }, "placement.zone is required"},
		{func(r *providers.CreateRequest) { r.Host = "us-east1-b" }, "not in zones"},
		{func(r *providers.CreateRequest) { r.Placement.Zone = "us-central1-b" }, "differs"},
		{func(r *providers.CreateRequest) { r.Placement.Image = "nope" }, "placement.image"},
		{func(r *providers.CreateRequest) { r.Placement.MachineType = "huge" }, "placement.machineType"},
		{func(r *providers.CreateRequest) { r.UserData = make(providers.UserData, maxUserData+1) }, "user-data"},
		{func(r *providers.CreateRequest) { r.Auth = &providers.Auth{Username: "a:b"} }, "auth.username"},
		{func(r *providers.CreateRequest) { r.Auth = &providers.Auth{LeaseKey: "not a key"} }, "auth.leaseKey"},
	} {
		req := good
		c.edit(&req)
		_, err := p.plan(req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", req.Name, err, c.want)
		}
	}
	if _, err := New("Bad Name", validConfig(), nil); err == nil {
		t.Error("a provider name that is not a label was accepted")
	}
}

// requestId is a UUID, the same for one attempt and another for the next.
func TestRequestID(t *testing.T) {
	req := providers.CreateRequest{Name: "egress-a", UID: "u", Installation: "i", Attempt: "op1"}
	a, b := requestID(req, ""), requestID(req, "")
	req.Attempt = "op2"
	c := requestID(req, "")
	d := requestID(req, "operation-1")
	if a != b || a == c || c == d || len(a) != 36 || a[14] != '8' {
		t.Errorf("requestIDs %s %s %s %s", a, b, c, d)
	}
}

func FuzzParseID(f *testing.F) {
	f.Add("zones/us-central1-a/instances/egress-abc")
	f.Add("zones//instances/x")
	f.Add("zones/a/instances/b/operations/c")
	f.Fuzz(func(t *testing.T, id string) {
		zone, name, err := ParseID(id)
		if err != nil {
			if zone != "" || name != "" {
				t.Fatalf("ParseID(%q) = %q, %q with error %v", id, zone, name, err)
			}
			return
		}
		if got := idOf(zone, name); got != id {
			t.Fatalf("ParseID(%q) = %q, %q, which make %q", id, zone, name, got)
		}
	})
}

// The sample config in deploy/ is a valid gcp block, key for key.
func TestSampleConfig(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/gcp.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Providers []struct {
			Name string    `yaml:"name"`
			Type string    `yaml:"type"`
			GCP  yaml.Node `yaml:"gcp"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, p := range file.Providers {
		if p.Type != "gcp" {
			continue
		}
		found++
		b, err := yaml.Marshal(&p.GCP)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		var cfg Config
		if err := dec.Decode(&cfg); err != nil {
			t.Fatalf("the sample's gcp block: %v", err)
		}
		if _, err := New(p.Name, cfg, nil); err != nil {
			t.Fatalf("the sample's gcp block: %v", err)
		}
		if cfg.Budgets.Call != Duration(30*time.Second) || cfg.Spot == nil || len(cfg.Zones) != 2 {
			t.Errorf("decoded %+v", cfg)
		}
	}
	if found == 0 {
		t.Fatal("the sample declares no gcp provider")
	}
}
