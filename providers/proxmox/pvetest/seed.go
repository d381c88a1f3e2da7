package pvetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/kdomanski/iso9660"
)

// seedResult is what a booted image learns from its NoCloud seed: the egressd.json that
// egressd's seed carries next to user-data, meta-data and vendor-data (providers/libvirt
// seed.go): {"v":1,"name":…,"port":…,"auth":…}, auth being the forward proxy's auth-file
// line (username:sha256:<salt>:<hash> or <proxy>:lease:<key>). err says why there is no
// proxy to run.
type seedResult struct {
	name string
	port int
	auth string
	err  string
}

// maxSeedFile bounds egressd.json; the real one is a line.
const maxSeedFile = 64 << 10

// readSeed reads an ISO 9660 image as cloud-init's NoCloud source would: it must be labelled
// cidata (or CIDATA) and hold egressd.json at its root.
func readSeed(iso []byte) seedResult {
	img, err := iso9660.OpenImage(bytes.NewReader(iso))
	if err != nil {
		return seedResult{err: "seed is not an ISO 9660 image"}
	}
	label, err := img.Label()
	if err != nil || !strings.EqualFold(strings.TrimSpace(label), "cidata") {
		return seedResult{err: fmt.Sprintf("seed label %q is not cidata", label)}
	}
	root, err := img.RootDir()
	if err != nil {
		return seedResult{err: "seed has no root directory"}
	}
	children, err := root.GetChildren()
	if err != nil {
		return seedResult{err: "seed root is unreadable"}
	}
	for _, f := range children {
		if f.IsDir() || f.Name() != "egressd.json" {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(f.Reader(), maxSeedFile+1))
		if err != nil || len(b) > maxSeedFile {
			return seedResult{err: "egressd.json is unreadable or too large"}
		}
		return parseProxyConfig(b)
	}
	return seedResult{err: "seed has no egressd.json"}
}

// parseProxyConfig decodes egressd.json. Its errors never quote the auth line.
func parseProxyConfig(b []byte) seedResult {
	var doc struct {
		V    int    `json:"v"`
		Name string `json:"name"`
		Port int    `json:"port"`
		Auth string `json:"auth"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return seedResult{err: "egressd.json is not JSON"}
	}
	switch {
	case doc.V != 1:
		return seedResult{err: fmt.Sprintf("egressd.json v %d is not 1", doc.V)}
	case doc.Port < 1 || doc.Port > 65535:
		return seedResult{err: fmt.Sprintf("egressd.json port %d is not a port", doc.Port)}
	case strings.ContainsAny(doc.Auth, "\r\n"):
		return seedResult{err: "egressd.json auth is more than one line"}
	}
	return seedResult{name: doc.Name, port: doc.Port, auth: doc.Auth}
}
