package proxmox

import "testing"

func TestBootDisk(t *testing.T) {
	cases := []struct {
		cfg  vmConfig
		want string
	}{
		// F19: the seed on ide2 is appended to the order; it is never the boot disk.
		{vmConfig{"boot": "order=ide2;net0;scsi0", "scsi0": "local-lvm:vm-1-disk-0,size=3G", "ide2": "local:iso/x.iso,media=cdrom"}, "scsi0"},
		{vmConfig{"boot": "order=scsi0;ide2", "scsi0": "local-lvm:vm-1-disk-0,size=3G"}, "scsi0"},
		{vmConfig{"boot": "order=sata1", "sata1": "local-lvm:a,media=cdrom", "bootdisk": "virtio0", "virtio0": "x"}, "virtio0"},
		{vmConfig{"sata0": "local-lvm:a,size=8G"}, "sata0"},
		{vmConfig{"ide0": "local:iso/a.iso,media=cdrom", "scsi0": "d"}, "scsi0"},
	}
	for _, c := range cases {
		if got, err := bootDisk(c.cfg); err != nil || got != c.want {
			t.Errorf("bootDisk(%v) = %q, %v, want %q", c.cfg, got, err, c.want)
		}
	}
	if _, err := bootDisk(vmConfig{"net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0"}); err == nil {
		t.Error("a config without disks has a boot disk")
	}
}

func TestDiskGiB(t *testing.T) {
	for in, want := range map[string]int{
		"local-lvm:vm-1-disk-0,size=3G": 3, "x,size=1T,ssd=1": 1024, "x,size=2048M": 2, "x,size=10.5G": 10, "x": 0, "x,size=G": 0,
	} {
		if got := diskGiB(in); got != want {
			t.Errorf("diskGiB(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestRewriteNet(t *testing.T) {
	cases := []struct {
		in, bridge string
		tag        int
		want       string
	}{
		{"virtio=BC:24:11:00:00:01,bridge=vmbr0", "vmbr1", 0, "virtio=BC:24:11:00:00:01,bridge=vmbr1"},
		{"virtio=BC:24:11:00:00:01,bridge=vmbr0", "", 4, "virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=4"},
		{"virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=7,firewall=1", "vmbr2", 4, "virtio=BC:24:11:00:00:01,bridge=vmbr2,tag=4,firewall=1"},
	}
	for _, c := range cases {
		if got, err := rewriteNet(c.in, c.bridge, c.tag); err != nil || got != c.want {
			t.Errorf("rewriteNet(%q) = %q, %v, want %q", c.in, got, err, c.want)
		}
	}
	if _, err := rewriteNet("", "vmbr0", 0); err == nil {
		t.Error("a missing net0 was rewritten")
	}
	for _, n := range []string{"virtio=BC:24:11:AA:BB:CC,bridge=vmbr0", "model=virtio,macaddr=BC:24:11:AA:BB:CC,bridge=vmbr0"} {
		if got := macOf(n); got != "bc:24:11:aa:bb:cc" {
			t.Errorf("macOf(%q) = %q", n, got)
		}
	}
}

func TestPickAddress(t *testing.T) {
	ifc := func(name, mac string, ips ...string) agentInterface {
		a := agentInterface{Name: name, HWAddress: mac}
		for _, ip := range ips {
			a.IPAddresses = append(a.IPAddresses, struct {
				Address string `json:"ip-address"`
				Type    string `json:"ip-address-type"`
			}{ip, "ipv4"})
		}
		return a
	}
	lo := ifc("lo", "00:00:00:00:00:00", "127.0.0.1", "::1")
	cases := []struct {
		ifaces []agentInterface
		mac    string
		want   string
	}{
		{[]agentInterface{lo, ifc("eth0", "bc:24:11:00:00:01", "fe80::1", "10.0.0.10")}, "bc:24:11:00:00:01", "10.0.0.10"},
		{[]agentInterface{lo, ifc("docker0", "02:42:00:00:00:01", "172.17.0.1"), ifc("eth0", "BC:24:11:00:00:01", "10.0.0.10")}, "bc:24:11:00:00:01", "10.0.0.10"},
		// The simulator's VMs live on loopback: on the VM's own NIC that is its address.
		{[]agentInterface{lo, ifc("eth0", "bc:24:11:00:00:01", "127.0.101.5")}, "bc:24:11:00:00:01", "127.0.101.5"},
		{[]agentInterface{lo, ifc("eth0", "", "169.254.1.1", "192.168.1.5")}, "", "192.168.1.5"},
		{[]agentInterface{lo}, "bc:24:11:00:00:01", ""},
		{nil, "", ""},
	}
	for _, c := range cases {
		if got := pickAddress(c.ifaces, c.mac); got != c.want {
			t.Errorf("pickAddress(%v, %s) = %q, want %q", c.ifaces, c.mac, got, c.want)
		}
	}
}
