package libvirt

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/providers/nocloud"
)

// readSeed returns the files of a seed ISO by name, and its volume label.
func readSeed(t *testing.T, iso []byte) (map[string][]byte, string) {
	t.Helper()
	files, label, err := nocloud.Read(iso)
	if err != nil {
		t.Fatal(err)
	}
	return files, label
}

func TestDomainXML(t *testing.T) {
	m := marks{Managed: true, UID: "u<1>", Installation: "i1", CreatedAt: "2026-11-30T00:00:00Z", Provider: "lv",
		Proxy: "crawl-1", Port: 3128, MAC: "52:54:00:01:02:03", Image: "tiny"}
	spec := domainSpec{Name: "egress-abc", DomainType: "qemu", VCPUs: 2, MemoryMiB: 512, Firmware: "bios",
		OverlayPath: "/p/egress-abc.qcow2", SeedPath: "/p/egress-abc-seed.iso",
		Host: HostConfig{Name: "h1", Network: "e2e"}, Marks: m}
	doc, err := domainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<domain type="qemu">`, `machine="pc"`, `<memory unit="MiB">512</memory>`, `<vcpu>2</vcpu>`,
		`<source file="/p/egress-abc.qcow2"></source>`, `<target dev="vda" bus="virtio"></target>`,
		`device="cdrom"`, `<target dev="hdc" bus="ide"></target>`, `<readonly></readonly>`,
		`<interface type="network">`, `<mac address="52:54:00:01:02:03"></mac>`, `<source network="e2e"></source>`,
		`name="org.qemu.guest_agent.0"`, `<serial type="file">`, `/var/log/libvirt/qemu/egress-abc-serial.log`,
		`<instance xmlns="` + metadataNS + `">`, `<uid>u&lt;1&gt;</uid>`,
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("domain XML lacks %s:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "host-passthrough") || strings.Contains(doc, "efi") {
		t.Errorf("a qemu/bios domain asks for host-passthrough or UEFI:\n%s", doc)
	}
	spec.DomainType, spec.Firmware, spec.Host = "kvm", "uefi", HostConfig{Name: "h1", Bridge: "br0"}
	doc, _ = domainXML(spec)
	for _, want := range []string{`<cpu mode="host-passthrough">`, `<os firmware="efi">`, `name="secure-boot"`, `<interface type="bridge">`, `<source bridge="br0">`} {
		if !strings.Contains(doc, want) {
			t.Errorf("kvm/uefi/bridge domain XML lacks %s:\n%s", want, doc)
		}
	}
	if err := xml.Unmarshal([]byte(doc), new(struct{})); err != nil {
		t.Errorf("not XML: %v", err)
	}

	// Round trip through what libvirt returns: the element without its xmlns.
	var parsed fakeDomDoc
	if err := xml.Unmarshal([]byte(doc), &parsed); err != nil {
		t.Fatal(err)
	}
	meta, err := parseFakeMetadata(parsed.Metadata.Inner)
	if err != nil {
		t.Fatal(err)
	}
	back, err := parseMarks(meta[metadataNS])
	if err != nil {
		t.Fatal(err)
	}
	back.XMLName = m.XMLName
	if back != m {
		t.Errorf("marks read back %+v, want %+v", back, m)
	}
	if c := back.contract(); !c.Managed || c.UID != "u<1>" || c.CreatedAt.IsZero() {
		t.Errorf("contract marks %+v", c)
	}
	if _, err := parseMarks("<instance><uid>"); err == nil {
		t.Error("parseMarks accepted broken XML")
	}
	padded, _ := parseMarks("<instance><managed>true</managed><uid>  u1\n</uid></instance>")
	if padded.UID != "u1" || !padded.contract().CreatedAt.IsZero() || !padded.contract().ExpiresAt.IsZero() {
		t.Errorf("padded marks %+v", padded)
	}
}

// The lifetime's end is an element of the marks, written only with a lifetime and read back
// exact; one that does not parse reads as no lifetime (decision 0076).
func TestLifetimeMark(t *testing.T) {
	at := time.Date(2026, 12, 3, 7, 0, 0, 123456789, time.UTC)
	created, expires := stamp(at, 20*time.Second)
	m := marks{Managed: true, UID: "u", CreatedAt: created, ExpiresAt: expires}
	if c := m.contract(); !c.CreatedAt.Equal(at) || !c.ExpiresAt.Equal(at.Add(20*time.Second)) {
		t.Errorf("contract %+v, want created %v and expires 20 s later", c, at)
	}
	if _, none := stamp(at, 0); none != "" {
		t.Errorf("no lifetime stamped %q", none)
	}
	for _, c := range []struct {
		raw  string
		want time.Time
	}{
		{"<instance><managed>true</managed><expiresAt>2026-12-03T07:00:20.123456789Z</expiresAt></instance>", at.Add(20 * time.Second)},
		{"<instance><managed>true</managed><expiresAt> soon </expiresAt></instance>", time.Time{}},
		{"<instance><managed>true</managed></instance>", time.Time{}},
	} {
		back, err := parseMarks(c.raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := back.contract().ExpiresAt; !got.Equal(c.want) {
			t.Errorf("%s: expiresAt %v, want %v", c.raw, got, c.want)
		}
	}
}

func TestVolumeXML(t *testing.T) {
	got := volumeXML("egress-abc.qcow2", "qcow2", 10<<30, "/p/base-lv-tiny.qcow2", "qcow2")
	want := `<volume><name>egress-abc.qcow2</name><capacity unit="bytes">10737418240</capacity><target><format type="qcow2"></format></target>` +
		`<backingStore><path>/p/base-lv-tiny.qcow2</path><format type="qcow2"></format></backingStore></volume>`
	if got != want {
		t.Errorf("volumeXML =\n%s\nwant\n%s", got, want)
	}
	if got := volumeXML("s.iso", "raw", 5, "", ""); strings.Contains(got, "backingStore") {
		t.Errorf("a plain volume has a backing store: %s", got)
	}
}
