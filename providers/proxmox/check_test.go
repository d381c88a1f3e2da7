package proxmox

import (
	"context"
	"os"
	"testing"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/proxmox/pvetest"
)

// One verdict per node, each reason from the stage that failed.
func TestCheck(t *testing.T) {
	sim := newSim(t, pvetest.Options{Nodes: []string{"pv1-1", "pv1-2"}})
	cfg := simConfig(t, sim)
	cfg.Nodes = []NodeConfig{{Name: "pv1-1"}, {Name: "pv1-2"}}
	p := newTestProvider(t, cfg, nil)
	ctx := context.Background()

	got := p.Check(ctx)
	if len(got) != 2 || got[0].Name != "pv1-1" || got[1].Name != "pv1-2" {
		t.Fatalf("Check = %+v", got)
	}
	for _, ts := range got {
		if !ts.Ready || ts.Reason != ReasonReachable || ts.Details["pveVersion"] != "9.2.20" || ts.Details["templates"] != "1/1" ||
			ts.Details["kernel"] == "" || ts.Details["isoStorageAvailGiB"] == "" {
			t.Errorf("healthy node: %+v", ts)
		}
	}

	sim.SetNodeDown("pv1-2", pvetest.StatusNoRoute)
	got = p.Check(ctx)
	if !got[0].Ready || got[1].Ready || got[1].Reason != ReasonAPIError {
		t.Errorf("pv1-2 down (595): %+v", got)
	}
	sim.SetNodeDown("pv1-2", 0)

	cases := []struct {
		name   string
		edit   func(*Config)
		reason providers.CheckReason
	}{
		{"no such ISO storage", func(c *Config) { c.ISOStorage = "proxy-seeds" }, ReasonStorageNotFound},
		{"ISO storage without iso content", func(c *Config) { c.ISOStorage = "local-lvm" }, ReasonStorageNotFound},
		{"template missing", func(c *Config) { c.Templates["other"] = TemplateConfig{VMID: 9100} }, ReasonTemplateNotFound},
		{"wrong secret", func(c *Config) { os.WriteFile(c.TokenFile, []byte("egressd@pve!egressd=wrong"), 0o600) }, ReasonUnauthorized},
		{"token file missing", func(c *Config) { c.TokenFile += ".missing" }, ReasonCredentialsUnavailable},
		{"API down", func(c *Config) { c.URL = "http://127.0.0.1:1" }, ReasonUnreachable},
	}
	for _, c := range cases {
		cfg := simConfig(t, sim)
		c.edit(&cfg)
		got := newTestProvider(t, cfg, nil).Check(ctx)
		if got[0].Ready || got[0].Reason != c.reason || got[0].Message == "" {
			t.Errorf("%s: %+v, want %s", c.name, got[0], c.reason)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got := p.Check(cctx); got[0].Reason != ReasonTimeout {
		t.Errorf("cancelled: %+v", got[0])
	}
}
