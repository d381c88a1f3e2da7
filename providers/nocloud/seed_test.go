package nocloud

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/egressd/egressd/providers"
)

// readSeed returns the files of a seed ISO by name, and its volume label.
func readSeed(t *testing.T, iso []byte) (map[string][]byte, string) {
	t.Helper()
	files, label, err := Read(iso)
	if err != nil {
		t.Fatal(err)
	}
	return files, label
}

func TestSeedISO(t *testing.T) {
	// Not text at all: user-data is delivered byte for byte, never parsed.
	userData := providers.UserData(append([]byte{0x1f, 0x8b, 0x08, 0, 0xff, '\n', '\r'}, "#cloud-config\nproxy_port: 3128\n"...))
	iso, err := Build(Spec{Name: "egress-abc", UserData: userData, Agent: true, Port: 8080,
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
	if got := string(files["vendor-data"]); got != AgentScript {
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
	iso, err := Build(Spec{Name: "egress-abc", Port: 3128, Auth: &providers.Auth{LeaseKey: providers.Secret(line + "\n")}})
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
	if b, _ := VendorData("", false); len(b) != 0 {
		t.Errorf("no agent, no vendorData: %q, want empty", b)
	}
	if b, _ := VendorData("#cloud-config\nntp: {}\n", false); string(b) != "#cloud-config\nntp: {}\n" {
		t.Errorf("vendorData only: %q", b)
	}
	b, err := VendorData("#cloud-config\nntp: {}\n", true)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasPrefix(s, "MIME-Version: 1.0\n") || !strings.Contains(s, "multipart/mixed") ||
		!strings.Contains(s, "text/x-shellscript") || !strings.Contains(s, "qemu-guest-agent") || !strings.Contains(s, "ntp: {}") {
		t.Errorf("both: %s", s)
	}
	if strings.Contains(AgentScript, "set -e") {
		t.Error("the agent script must not stop at the first missing tool")
	}
}

// A simulator reads the proxy's port and credential back from the seed it was given.
func TestReadProxyConfig(t *testing.T) {
	iso, err := Build(Spec{Name: "egress-abc", Port: 8080, Auth: &providers.Auth{Username: "u", Password: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := ReadProxyConfig(iso)
	if err != nil || pc.Port != 8080 || pc.Name != "egress-abc" || !strings.HasPrefix(pc.Auth, "u:sha256:") {
		t.Fatalf("ReadProxyConfig = %+v, %v", pc, err)
	}
	if _, err := ReadProxyConfig([]byte("not an ISO")); err == nil {
		t.Error("ReadProxyConfig accepted garbage")
	}
}

func FuzzReadProxyConfig(f *testing.F) {
	iso, _ := Build(Spec{Name: "egress-abc", Port: 3128})
	f.Add(iso)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ReadProxyConfig(b) // must not panic
	})
}

func TestCheckRequest(t *testing.T) {
	ok := providers.CreateRequest{Name: "egress-abc", Port: 3128, Auth: &providers.Auth{Username: "u", Password: "p"}}
	if errs := CheckRequest(ok); len(errs) != 0 {
		t.Fatalf("a valid request: %v", errs)
	}
	cases := []struct {
		edit func(*providers.CreateRequest)
		want string
	}{
		{func(r *providers.CreateRequest) { r.Name = "Egress_1" }, "name"},
		{func(r *providers.CreateRequest) { r.Name = strings.Repeat("a", 64) }, "name"},
		{func(r *providers.CreateRequest) { r.Port = 0 }, "port"},
		{func(r *providers.CreateRequest) { r.Port = 65536 }, "port"},
		{func(r *providers.CreateRequest) { r.Auth = &providers.Auth{Username: "a:b", Password: "p"} }, "auth.username"},
		{func(r *providers.CreateRequest) { r.Auth = &providers.Auth{Password: "p"} }, "auth.username"},
		{func(r *providers.CreateRequest) { r.Auth = &providers.Auth{LeaseKey: "not a key line"} }, "auth.leaseKey"},
	}
	for _, c := range cases {
		r := ok
		c.edit(&r)
		errs := CheckRequest(r)
		if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), c.want) {
			t.Errorf("%+v: %v, want one error naming %s", r, errs, c.want)
		}
	}
}
