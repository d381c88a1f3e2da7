package proxmox

import (
	"encoding/json"
	"strings"
	"testing"
)

// IDs come from the store and from humans: strict, never a panic, and what parses prints back.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"vms/100000/egress-abc", "vms/0100/x", "vms//", "vms/999999999/a", "vms/1e5/a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		vmid, name, err := parseID(id)
		if err == nil && idOf(vmid, name) != id {
			t.Errorf("parseID(%q) = %d, %q, which prints as %q", id, vmid, name, idOf(vmid, name))
		}
	})
}

// PVE's answers (status line, error body, a VM's config, the agent's interfaces) never make
// the decoders panic, and an error's text never grows past its inputs (and a status text).
func FuzzDecodeAnswers(f *testing.F) {
	f.Add(500, "500 VM is locked (clone)", []byte(`{"data":null,"message":"VM is locked (clone)\n","errors":{"a":1}}`))
	f.Add(200, "200 OK", []byte(`{"description":"egressd-managed=true\n","cores":2,"net0":"virtio=BC:24:11:00:00:01,bridge=vmbr0","boot":"order=scsi0;ide2"}`))
	f.Add(200, "200 OK", []byte(`{"result":[{"name":"eth0","hardware-address":"bc:24:11:00:00:01","ip-addresses":[{"ip-address":"10.0.0.1","ip-address-type":"ipv4"}]}]}`))
	f.Fuzz(func(t *testing.T, status int, line string, body []byte) {
		e := newAPIError(status, line, body)
		if len(e.Message) > len(line)+len(body)+40 {
			t.Errorf("message of %d bytes from %d+%d", len(e.Message), len(line), len(body))
		}
		_ = e.Error()
		var cfg vmConfig
		if json.Unmarshal(body, &cfg) == nil {
			_, _ = bootDisk(cfg)
			_ = diskGiB(cfg["scsi0"])
			_ = macOf(cfg["net0"])
			_, _ = rewriteNet(cfg["net0"], "vmbr1", 4)
			m, _ := parseMarks(cfg["description"])
			if m.UID != strings.TrimSpace(m.UID) {
				t.Errorf("untrimmed UID %q", m.UID)
			}
		}
		var ifs struct {
			Result []agentInterface `json:"result"`
		}
		if json.Unmarshal(body, &ifs) == nil {
			_ = pickAddress(ifs.Result, "bc:24:11:00:00:01")
		}
		_, _ = upidNode(line)
	})
}
