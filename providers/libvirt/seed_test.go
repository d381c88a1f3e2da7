package libvirt

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/kdomanski/iso9660"

	"github.com/egressd/egressd/providers"
)

// readSeed returns the files of a seed ISO by name, and its volume label.
func readSeed(t *testing.T, iso []byte) (map[string][]byte, string) {
	t.Helper()
	img, err := iso9660.OpenImage(bytes.NewReader(iso))
	if err != nil {
		t.Fatal(err)
	}
	label, err := img.Label()
	if err != nil {
		t.Fatal(err)
	}
	root, err := img.RootDir()
	if err != nil {
		t.Fatal(err)
	}
	children, err := root.GetChildren()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range children {
		b, err := io.ReadAll(f.Reader())
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name()] = b
	}
	return files, label
}

func TestSeedISO(t *testing.T) {
	// Not text at all: user-data is delivered byte for byte, never parsed.
	userData := providers.UserData(append([]byte{0x1f, 0x8b, 0x08, 0, 0xff, '\n', '\r'}, "#cloud-config\nproxy_port: 3128\n"...))
	iso, err := buildSeed(seedSpec{Name: "egress-abc", UserData: userData, Agent: true, Port: 8080,
		Auth: &providers.Auth{Username: "crawler", Password: "hunter2"}})
	if err != nil {
		t.Fatal(err)
	}
	files, label := readSeed(t, iso)
	if label != "cidata" {
		t.Errorf("label %q, want cidata", label)
	}
	if !bytes.Equal(files["user-data"], userData) {
		t.Errorf("user-data = %q, want the request's bytes", files["user-data"])
	}
	if got := string(files["meta-data"]); got != "instance-id: egress-abc\nlocal-hostname: egress-abc\n" {
		t.Errorf("meta-data = %q", got)
	}
	if got := string(files["vendor-data"]); got != agentScript {
		t.Errorf("vendor-data = %q, want the agent script", got)
	}
	var proxy struct {
		Port int    `json:"port"`
		Auth string `json:"auth"`
	}
	if err := json.Unmarshal(files["egressd.json"], &proxy); err != nil {
		t.Fatalf("egressd.json: %v", err)
	}
	parts := strings.Split(proxy.Auth, ":")
	if proxy.Port != 8080 || len(parts) != 4 || parts[0] != "crawler" || parts[1] != "sha256" {
		t.Fatalf("egressd.json = %s", files["egressd.json"])
	}
	salt, _ := hex.DecodeString(parts[2])
	sum := sha256.Sum256(append(salt, "hunter2"...))
	if parts[3] != hex.EncodeToString(sum[:]) {
		t.Error("egressd.json's auth hash does not verify the password")
	}
	if bytes.Contains(iso, []byte("hunter2")) {
		t.Error("the seed holds the password in clear")
	}
}

// A lease key is written as the proxy's auth-file line, as it is.
func TestSeedLeaseKey(t *testing.T) {
	line := "egress-abc:lease:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
	iso, err := buildSeed(seedSpec{Name: "egress-abc", Port: 3128, Auth: &providers.Auth{LeaseKey: providers.Secret(line + "\n")}})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := readSeed(t, iso)
	var proxy struct {
		Auth string `json:"auth"`
	}
	if err := json.Unmarshal(files["egressd.json"], &proxy); err != nil || proxy.Auth != line {
		t.Fatalf("egressd.json = %s (%v), want auth %q", files["egressd.json"], err, line)
	}
}

func TestVendorData(t *testing.T) {
	if b, _ := vendorData("", false); len(b) != 0 {
		t.Errorf("no agent, no vendorData: %q, want empty", b)
	}
	if b, _ := vendorData("#cloud-config\nntp: {}\n", false); string(b) != "#cloud-config\nntp: {}\n" {
		t.Errorf("vendorData only: %q", b)
	}
	b, err := vendorData("#cloud-config\nntp: {}\n", true)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasPrefix(s, "MIME-Version: 1.0\n") || !strings.Contains(s, "multipart/mixed") ||
		!strings.Contains(s, "text/x-shellscript") || !strings.Contains(s, "qemu-guest-agent") || !strings.Contains(s, "ntp: {}") {
		t.Errorf("both: %s", s)
	}
	if strings.Contains(agentScript, "set -e") {
		t.Error("the agent script must not stop at the first missing tool")
	}
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
	if padded.UID != "u1" || !padded.contract().CreatedAt.IsZero() {
		t.Errorf("padded marks %+v", padded)
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
