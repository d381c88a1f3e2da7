package libvirt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"strings"

	"github.com/kdomanski/iso9660"

	"github.com/egressd/egressd/providers"
)

// The NoCloud seed is an ISO 9660 image labelled cidata that cloud-init reads at first boot:
//
//	user-data    the request's user-data, byte for byte, never parsed or rewritten
//	meta-data    instance-id and local-hostname, both the instance name, so that a reboot is
//	             never taken for a new instance
//	vendor-data  the guest-agent script and/or Config.VendorData, or empty
//	egressd.json the proxy's port and, with auth, its credential as a salted hash: for guest
//	             images that run egressd's forward proxy; cloud-init ignores it
const (
	seedLabel      = "cidata"
	userDataFile   = "user-data"
	metaDataFile   = "meta-data"
	vendorDataFile = "vendor-data"
	proxyFile      = "egressd.json"
)

// seedSpec is what goes into a seed.
type seedSpec struct {
	Name       string
	UserData   providers.UserData
	VendorData string // Config.VendorData
	Agent      bool   // install the guest agent
	Port       int
	Auth       *providers.Auth
}

// buildSeed returns the ISO image. The library stages files in a private temp dir (mode 0700),
// removed before it returns.
func buildSeed(s seedSpec) ([]byte, error) {
	w, err := iso9660.NewWriter()
	if err != nil {
		return nil, fmt.Errorf("%w: seed ISO: %w", errLocal, err)
	}
	defer w.Cleanup()
	vendor, err := vendorData(s.VendorData, s.Agent)
	if err != nil {
		return nil, err
	}
	proxy, err := proxyConfig(s)
	if err != nil {
		return nil, err
	}
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", s.Name, s.Name)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{userDataFile, s.UserData},
		{metaDataFile, []byte(meta)},
		{vendorDataFile, vendor},
		{proxyFile, proxy},
	} {
		if err := w.AddFile(bytes.NewReader(f.data), f.name); err != nil {
			return nil, fmt.Errorf("%w: seed ISO %s: %w", errLocal, f.name, err)
		}
	}
	var buf bytes.Buffer
	if err := w.WriteTo(&buf, seedLabel); err != nil {
		return nil, fmt.Errorf("%w: seed ISO: %w", errLocal, err)
	}
	return buf.Bytes(), nil
}

// proxyConfig is egressd.json. The password itself never leaves the process: the file holds
// the line egressd's forward proxy reads from its auth file,
// username:sha256:<hex salt>:<hex sha256(salt + password)>.
func proxyConfig(s seedSpec) ([]byte, error) {
	doc := struct {
		V    int    `json:"v"`
		Name string `json:"name"`
		Port int    `json:"port"`
		Auth string `json:"auth,omitempty"`
	}{V: 1, Name: s.Name, Port: s.Port, Auth: providers.AuthFileLine(s.Auth)}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errLocal, proxyFile, err)
	}
	return append(b, '\n'), nil
}

// agentScript installs and starts qemu-guest-agent with whatever package manager and init
// system the guest has. It is a script, not cloud-config: cloud-init merges a vendor-data
// cloud-config under the user-data, and a user-data with its own `packages:` would silently
// drop the agent. Every step is guarded, not `set -e`: one missing tool must not stop the rest.
const agentScript = `#!/bin/sh
# egressd: install and start qemu-guest-agent, which tells the host this VM's address.
if ! command -v qemu-ga >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-guest-agent
  elif command -v dnf >/dev/null 2>&1; then
    dnf install -y qemu-guest-agent
  elif command -v yum >/dev/null 2>&1; then
    yum install -y qemu-guest-agent
  elif command -v zypper >/dev/null 2>&1; then
    zypper --non-interactive install qemu-guest-agent
  elif command -v apk >/dev/null 2>&1; then
    apk add --no-cache qemu-guest-agent
  else
    echo "egressd: no known package manager; qemu-guest-agent not installed" >&2
  fi
fi
if command -v systemctl >/dev/null 2>&1; then
  systemctl enable --now qemu-guest-agent || true
elif command -v rc-update >/dev/null 2>&1; then
  rc-update add qemu-guest-agent default || true
  rc-service qemu-guest-agent start || true
fi
`

// vendorData is the vendor-data file: the agent script, the configured document, both as a
// MIME multipart (the configured one first, as text/plain so that cloud-init sniffs its
// type), or nothing.
func vendorData(configured string, agent bool) ([]byte, error) {
	switch {
	case configured == "" && !agent:
		return nil, nil
	case configured == "":
		return []byte(agentScript), nil
	case !agent:
		return []byte(configured), nil
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, part := range []struct{ ctype, name, data string }{
		{"text/plain", "egressd-vendor-data", configured},
		{"text/x-shellscript", "egressd-guest-agent.sh", agentScript},
	} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", part.ctype+`; charset="utf-8"`)
		h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", part.name))
		w, err := mw.CreatePart(h)
		if err != nil {
			return nil, fmt.Errorf("%w: vendor-data: %w", errLocal, err)
		}
		w.Write([]byte(part.data))
	}
	if err := mw.Close(); err != nil {
		return nil, fmt.Errorf("%w: vendor-data: %w", errLocal, err)
	}
	var out strings.Builder
	out.WriteString("MIME-Version: 1.0\n")
	out.WriteString(fmt.Sprintf("Content-Type: multipart/mixed; boundary=%q\n\n", mw.Boundary()))
	out.Write(body.Bytes())
	return []byte(out.String()), nil
}
