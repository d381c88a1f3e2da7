package pvetest

import (
	"strings"
	"testing"
)

// ParseUPID accepts exactly what String writes: whatever parses re-encodes to the same text.
func FuzzParseUPID(f *testing.F) {
	f.Add("UPID:pve1:000A1B2C:0123ABCD:674C5E10:qmclone:9000:egressd@pve!prov:")
	f.Add("UPID:pv1-1:00000001:00000002:00000003:imgcopy::root@pam:")
	f.Add("UPID:a:zzzzzzzz:0:0:t:i:u:")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUPID(s)
		if err != nil {
			return
		}
		if got := u.String(); !strings.EqualFold(got, s) {
			t.Fatalf("%q parsed to %+v, which encodes as %q", s, u, got)
		}
		if again, err := ParseUPID(u.String()); err != nil || again != u {
			t.Fatalf("round trip of %+v: %+v, %v", u, again, err)
		}
	})
}

// The config value parsers (property strings, net, boot, drives, sizes) never panic, and
// what they accept they print back in a form they accept again unchanged.
func FuzzConfigValues(f *testing.F) {
	for _, s := range []string{
		"virtio=BC:24:11:2F:3A:4B,bridge=vmbr0,tag=4", "model=e1000,macaddr=bc:24:11:00:00:01",
		"order=scsi0;ide2;net0", "cdn", "local-lvm:vm-100-disk-0,size=3G",
		"proxy-seeds:iso/proxy-x-seed.iso,media=cdrom", "none,media=cdrom", "1.5G", "a=b,a=c", ",,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := parsePropString(s, "file"); err == nil {
			if again, err := parsePropString(p.format("file"), "file"); err != nil || again.format("file") != p.format("file") {
				t.Fatalf("property string %q → %q → %v", s, p.format("file"), err)
			}
		}
		if n, err := parseNet(s); err == nil && n.MAC != "" {
			again, err := parseNet(n.String())
			if err != nil || again.String() != n.String() {
				t.Fatalf("net %q → %q → %v", s, n.String(), err)
			}
		}
		if order, err := parseBoot(s); err == nil && order != nil {
			again, err := parseBoot("order=" + strings.Join(order, ";"))
			if err != nil || strings.Join(again, ";") != strings.Join(order, ";") {
				t.Fatalf("boot %q → %v → %v, %v", s, order, again, err)
			}
		}
		if d, err := parseDrive(s); err == nil {
			again, err := parseDrive(d.String())
			if err != nil || again.String() != d.String() || again.Size != d.Size {
				t.Fatalf("drive %q → %q → %v", s, d.String(), err)
			}
		}
		if n, err := parseSize(s); err == nil {
			if n < 0 {
				t.Fatalf("size %q = %d", s, n)
			}
			if back, err := parseSize(formatSize(n)); err != nil || back != n {
				t.Fatalf("size %q = %d → %q → %d, %v", s, n, formatSize(n), back, err)
			}
		}
		_ = parseProxyConfig([]byte(s))
		_, _ = splitTags(s), foldTags(s)
	})
}
