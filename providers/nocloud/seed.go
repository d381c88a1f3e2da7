// Package nocloud builds the NoCloud seed ISO that cloud-init reads at a VM's first boot. The
// VM providers (libvirt, proxmox) share it, so every guest sees the same files whichever
// hypervisor runs it.
package nocloud

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"strings"

	"github.com/kdomanski/iso9660"

	"github.com/egressd/egressd/internal/leaseauth"
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
	Label          = "cidata"
	UserDataFile   = "user-data"
	MetaDataFile   = "meta-data"
	VendorDataFile = "vendor-data"
	ProxyFile      = "egressd.json"
)

// ErrBuild is the cause of every error Build returns: local I/O, never the backend's.
var ErrBuild = errors.New("building the NoCloud seed failed")

// Spec is what goes into a seed.
type Spec struct {
	Name       string // the instance name: instance-id and hostname
	UserData   providers.UserData
	VendorData string // the provider's configured vendor-data document
	Agent      bool   // install the guest agent
	Port       int
	Auth       *providers.Auth
}

// CheckRequest returns one error per field of a request that no seed could carry, each
// naming the field: the providers that deliver their proxy's config through the seed check
// it before any backend call.
func CheckRequest(req providers.CreateRequest) []error {
	var errs []error
	if !providers.ValidName(req.Name) {
		errs = append(errs, fmt.Errorf("name %q is not a DNS-1123 label", req.Name))
	}
	if req.Port < 1 || req.Port > 65535 {
		errs = append(errs, fmt.Errorf("port must be between 1 and 65535, got %d", req.Port))
	}
	switch a := req.Auth; {
	case a.Lease():
		if _, err := leaseauth.ParseKeyLines(a.LeaseKey.Reveal()); err != nil {
			errs = append(errs, fmt.Errorf("auth.leaseKey: %v", err))
		}
	case a != nil && (a.Username == "" || strings.ContainsAny(a.Username, ":\r\n")):
		// egressd.json's auth is one line, user:sha256:salt:hash.
		errs = append(errs, errors.New("auth.username must be non-empty and hold no ':' or line break"))
	}
	return errs
}

// Build returns the ISO image. The library stages files in a private temp dir (mode 0700),
// removed before it returns.
func Build(s Spec) ([]byte, error) {
	w, err := iso9660.NewWriter()
	if err != nil {
		return nil, fmt.Errorf("%w: seed ISO: %w", ErrBuild, err)
	}
	defer w.Cleanup()
	vendor, err := VendorData(s.VendorData, s.Agent)
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
		{UserDataFile, s.UserData},
		{MetaDataFile, []byte(meta)},
		{VendorDataFile, vendor},
		{ProxyFile, proxy},
	} {
		if err := w.AddFile(bytes.NewReader(f.data), f.name); err != nil {
			return nil, fmt.Errorf("%w: seed ISO %s: %w", ErrBuild, f.name, err)
		}
	}
	var buf bytes.Buffer
	if err := w.WriteTo(&buf, Label); err != nil {
		return nil, fmt.Errorf("%w: seed ISO: %w", ErrBuild, err)
	}
	return buf.Bytes(), nil
}

// proxyConfig is egressd.json. The password itself never leaves the process: the file holds
// the line egressd's forward proxy reads from its auth file,
// username:sha256:<hex salt>:<hex sha256(salt + password)>.
func proxyConfig(s Spec) ([]byte, error) {
	doc := providers.ProxyConfigOf(s.Name, s.Port, s.Auth)
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBuild, ProxyFile, err)
	}
	return append(b, '\n'), nil
}

// AgentScript installs and starts qemu-guest-agent with whatever package manager and init
// system the guest has. It is a script, not cloud-config: cloud-init merges a vendor-data
// cloud-config under the user-data, and a user-data with its own `packages:` would silently
// drop the agent. Every step is guarded, not `set -e`: one missing tool must not stop the rest.
const AgentScript = `#!/bin/sh
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

// VendorData is the vendor-data file: the agent script, the configured document, both as a
// MIME multipart (the configured one first, as text/plain so that cloud-init sniffs its
// type), or nothing.
func VendorData(configured string, agent bool) ([]byte, error) {
	switch {
	case configured == "" && !agent:
		return nil, nil
	case configured == "":
		return []byte(AgentScript), nil
	case !agent:
		return []byte(configured), nil
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, part := range []struct{ ctype, name, data string }{
		{"text/plain", "egressd-vendor-data", configured},
		{"text/x-shellscript", "egressd-guest-agent.sh", AgentScript},
	} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", part.ctype+`; charset="utf-8"`)
		h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", part.name))
		w, err := mw.CreatePart(h)
		if err != nil {
			return nil, fmt.Errorf("%w: vendor-data: %w", ErrBuild, err)
		}
		w.Write([]byte(part.data))
	}
	if err := mw.Close(); err != nil {
		return nil, fmt.Errorf("%w: vendor-data: %w", ErrBuild, err)
	}
	var out strings.Builder
	out.WriteString("MIME-Version: 1.0\n")
	out.WriteString(fmt.Sprintf("Content-Type: multipart/mixed; boundary=%q\n\n", mw.Boundary()))
	out.Write(body.Bytes())
	return []byte(out.String()), nil
}

// Read returns the files of a seed ISO by name, and its volume label: for the simulators that
// play a guest booting from it, and for tests.
func Read(iso []byte) (files map[string][]byte, label string, err error) {
	img, err := iso9660.OpenImage(bytes.NewReader(iso))
	if err != nil {
		return nil, "", fmt.Errorf("seed ISO: %w", err)
	}
	if label, err = img.Label(); err != nil {
		return nil, "", fmt.Errorf("seed ISO label: %w", err)
	}
	root, err := img.RootDir()
	if err != nil {
		return nil, "", fmt.Errorf("seed ISO root: %w", err)
	}
	children, err := root.GetChildren()
	if err != nil {
		return nil, "", fmt.Errorf("seed ISO root: %w", err)
	}
	files = map[string][]byte{}
	for _, f := range children {
		if f.IsDir() {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(f.Reader(), maxFile))
		if err != nil {
			return nil, "", fmt.Errorf("seed ISO %s: %w", f.Name(), err)
		}
		files[f.Name()] = b
	}
	return files, label, nil
}

// ProxyConfig is egressd.json as a guest reads it (providers.ProxyConfig).
type ProxyConfig = providers.ProxyConfig

// ReadProxyConfig reads egressd.json from a seed ISO.
func ReadProxyConfig(iso []byte) (ProxyConfig, error) {
	files, label, err := Read(iso)
	if err != nil {
		return ProxyConfig{}, err
	}
	if label != Label {
		return ProxyConfig{}, fmt.Errorf("seed ISO is labelled %q, not %q", label, Label)
	}
	raw, ok := files[ProxyFile]
	if !ok {
		return ProxyConfig{}, fmt.Errorf("seed ISO has no %s", ProxyFile)
	}
	var pc ProxyConfig
	if err := json.Unmarshal(raw, &pc); err != nil {
		return ProxyConfig{}, fmt.Errorf("seed ISO %s: %w", ProxyFile, err)
	}
	return pc, nil
}

// maxFile bounds what Read takes from one file: seeds are small, and a simulator must not be
// made to swallow gigabytes.
const maxFile = 16 << 20
