package libvirt

import (
	"context"
	"errors"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/egressd/egressd/providers"
)

func TestGetStateTable(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	name := providers.InstanceName(testInstallation, "u1")
	inst := mustCreate(t, p, testRequest(name, "u1"))
	leases := func(f *fakeCloud) []golibvirt.NetworkDhcpLease { return f.hosts["h1"].networks["default"].leases }
	var saved []golibvirt.NetworkDhcpLease
	cloud.with(func(f *fakeCloud) { saved = leases(f) })
	for _, c := range []struct {
		state   golibvirt.DomainState
		lease   bool
		agent   bool
		want    providers.State
		address bool
	}{
		{golibvirt.DomainNostate, true, false, providers.StateProvisioning, false},
		{golibvirt.DomainRunning, false, false, providers.StateProvisioning, false},
		{golibvirt.DomainRunning, true, false, providers.StateRunning, true},
		{golibvirt.DomainRunning, false, true, providers.StateProvisioning, false}, // agent, but the guest has no IP yet
		{golibvirt.DomainBlocked, true, false, providers.StateRunning, true},
		{golibvirt.DomainBlocked, false, false, providers.StateProvisioning, false},
		{golibvirt.DomainPaused, true, false, providers.StateStopped, false},
		{golibvirt.DomainShutdown, true, false, providers.StateStopped, false},
		{golibvirt.DomainShutoff, true, false, providers.StateStopped, false},
		{golibvirt.DomainCrashed, true, false, providers.StateStopped, false},
		{golibvirt.DomainPmsuspended, true, false, providers.StateStopped, false},
		{golibvirt.DomainState(42), true, false, providers.StateStopped, false},
	} {
		cloud.with(func(f *fakeCloud) {
			f.hosts["h1"].domains[name].state = c.state
			f.hosts["h1"].agent = c.agent
			f.hosts["h1"].networks["default"].leases = nil
			if c.lease {
				f.hosts["h1"].networks["default"].leases = saved
			}
		})
		got, err := p.Get(context.Background(), inst.ID)
		if err != nil {
			t.Errorf("%s: %v", stateWord(c.state), err)
			continue
		}
		if got.State != c.want || (got.Address != "") != c.address || got.Port != 3128 || got.Marks.UID != "u1" {
			t.Errorf("%s (lease %v, agent %v): %+v, want %s with address %v", stateWord(c.state), c.lease, c.agent, got, c.want, c.address)
		}
	}
}

// The agent's answer is taken for the NIC with the domain's MAC only: a guest's docker0 or
// loopback address is no address for the proxy.
func TestAddressFromTheAgentByMAC(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	name := providers.InstanceName(testInstallation, "u1")
	inst := mustCreate(t, p, testRequest(name, "u1"))
	want := inst.Address
	cloud.with(func(f *fakeCloud) { f.hosts["h1"].agent = true })
	got, err := p.Get(context.Background(), inst.ID)
	if err != nil || got.Address != want || got.State != providers.StateRunning {
		t.Fatalf("Get = %+v, %v, want Running at %s", got, err, want)
	}
	if cloud.count("DHCPLeases") != 1 {
		t.Errorf("DHCPLeases called %d times; the agent's answer should have been enough", cloud.count("DHCPLeases"))
	}

	ifaces := []golibvirt.DomainInterface{
		{Name: "lo", Hwaddr: golibvirt.OptString{"00:00:00:00:00:00"}, Addrs: []golibvirt.DomainIPAddr{{Type: 0, Addr: "127.0.0.1"}}},
		{Name: "docker0", Hwaddr: golibvirt.OptString{"02:42:ac:11:00:01"}, Addrs: []golibvirt.DomainIPAddr{{Type: 0, Addr: "172.17.0.1"}}},
		{Name: "eth0", Hwaddr: golibvirt.OptString{"52:54:00:AA:BB:CC"}, Addrs: []golibvirt.DomainIPAddr{
			{Type: 1, Addr: "fe80::1"}, {Type: 0, Addr: "169.254.3.3"}, {Type: 0, Addr: "192.0.2.7"}}},
	}
	if got := agentAddress(ifaces, "52:54:00:aa:bb:cc"); got != "192.0.2.7" {
		t.Errorf("agentAddress = %q", got)
	}
	if got := agentAddress(ifaces, "52:54:00:00:00:01"); got != "" {
		t.Errorf("agentAddress for a MAC the guest does not have = %q", got)
	}
}

func TestLeaseChoice(t *testing.T) {
	now := time.Now()
	lease := func(mac, ip string, expiry time.Time) golibvirt.NetworkDhcpLease {
		return golibvirt.NetworkDhcpLease{Mac: golibvirt.OptString{mac}, Ipaddr: ip, Type: 0, Expirytime: expiry.Unix()}
	}
	leases := []golibvirt.NetworkDhcpLease{
		lease("52:54:00:00:00:01", "192.0.2.1", now.Add(-time.Minute)), // expired: a predecessor's
		lease("52:54:00:00:00:02", "192.0.2.2", now.Add(time.Hour)),    // someone else's
		lease("52:54:00:00:00:01", "192.0.2.3", now.Add(time.Hour)),
		{Mac: golibvirt.OptString{"52:54:00:00:00:01"}, Ipaddr: "2001:db8::1", Type: 1, Expirytime: now.Add(2 * time.Hour).Unix()},
	}
	if got := leaseAddress(leases, "52:54:00:00:00:01", now); got != "192.0.2.3" {
		t.Errorf("leaseAddress = %q, want the unexpired IPv4 lease of the MAC", got)
	}
	if got := leaseAddress(leases[:2], "52:54:00:00:00:01", now); got != "" {
		t.Errorf("leaseAddress with only an expired lease = %q", got)
	}
}

// H3: an address that cannot be read is not a missing address. When every source fails
// because the connection broke, Get fails (Transient) rather than demote a running proxy to
// Provisioning; when a source answers "nothing yet", the answer is Provisioning.
func TestUnreadableAddressIsNotMissing(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	inst := mustCreate(t, p, testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))

	broken := errors.New("read tcp: connection reset by peer")
	cloud.with(func(f *fakeCloud) {
		f.before = func(_ *fakeProc, method, _ string) error {
			if method == "AgentInterfaces" || method == "LookupNetwork" {
				return broken
			}
			return nil
		}
	})
	got, err := p.Get(context.Background(), inst.ID)
	wantClass(t, "Get with every address source broken", err, providers.ErrTransient)
	if !errors.Is(err, errNoAddressRead) {
		t.Errorf("err = %v (%+v), want errNoAddressRead", err, got)
	}

	// The agent answers "not connected" (a libvirt answer), the leases say nothing: Provisioning.
	cloud.with(func(f *fakeCloud) {
		f.before = nil
		f.hosts["h1"].networks["default"].leases = nil
	})
	got, err = p.Get(context.Background(), inst.ID)
	if err != nil || got.State != providers.StateProvisioning {
		t.Errorf("Get with no address yet = %+v, %v, want Provisioning", got, err)
	}
}

func TestGetIDs(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	p := newFakeProvider(t, newFakeCloud().proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	_, err := p.Get(context.Background(), "hosts/h9/domains/egress-abc")
	wantClass(t, "Get on a host not in the config", err, providers.ErrPermanent)
	_, err = p.Get(context.Background(), "hosts/h1/domains/egress-abc")
	wantClass(t, "Get of a domain that is not there", err, providers.ErrNotFound)
}
