package libvirt

import (
	"context"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/egressd/egressd/providers"
)

func TestCheck(t *testing.T) {
	cloud := newFakeCloud("h1", "h2", "h3", "h4")
	cfg := testConfig("https://images.example/tiny.qcow2", "", "h1", "h2", "h3", "h4")
	cfg.Hosts[2].Pool = "missing"
	proc := cloud.proc()
	p := newFakeProvider(t, proc, cfg, nil, Hooks{})
	cloud.with(func(f *fakeCloud) {
		f.hosts["h2"].pools["default"].state = golibvirt.StoragePoolInactive
		f.hosts["h4"].down = true
	})
	got := p.Check(context.Background())
	want := []struct {
		name   string
		reason providers.CheckReason
	}{
		{"h1", ReasonReachable}, {"h2", ReasonPoolNotActive}, {"h3", ReasonPoolNotFound}, {"h4", ReasonUnreachable},
	}
	if len(got) != len(want) {
		t.Fatalf("Check = %+v", got)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Reason != w.reason || got[i].Ready != (w.reason == ReasonReachable) {
			t.Errorf("target %d = %+v, want %s %s", i, got[i], w.name, w.reason)
		}
	}
	d := got[0].Details
	if d["libvirtVersion"] != "9.0.0" || d["hostname"] != "h1.example" || d["poolState"] != "running" ||
		d["poolCapacityGiB"] != "1024.0" || d["user"] != "egressd" || d["pool"] != "default" || got[0].Address != "h1.example:22" {
		t.Errorf("details %+v", got[0])
	}
	if got[1].Details["poolState"] != "inactive" || got[1].Message == "" {
		t.Errorf("inactive pool %+v", got[1])
	}
	// Each check dials a connection of its own and leaves the pooled ones alone.
	if n := proc.dials.Load(); n != 4 {
		t.Errorf("%d dials for 4 checks", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, ts := range p.Check(ctx) {
		if ts.Ready || ts.Reason != ReasonTimeout {
			t.Errorf("a check with an ended context = %+v, want Timeout", ts)
		}
	}
}
