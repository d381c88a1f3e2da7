package providers

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// AuthFileLine is the one line of the auth file egressd's forward proxy reads
// (`egressd forward-proxy --auth-file`), for providers that deliver it to a guest: for a
// password, username:sha256:<hex salt>:<hex sha256(salt + password)>, so the password itself
// never leaves this process; for a lease key, the key's own line, which the proxy needs to
// check signatures. "" for no auth.
func AuthFileLine(a *Auth) string {
	switch {
	case a.Lease():
		return strings.TrimRight(a.LeaseKey.Reveal(), "\r\n")
	case a != nil:
		salt := make([]byte, 16)
		rand.Read(salt)
		h := sha256.New()
		h.Write(salt)
		h.Write([]byte(a.Password.Reveal()))
		return a.Username + ":sha256:" + hex.EncodeToString(salt) + ":" + hex.EncodeToString(h.Sum(nil))
	}
	return ""
}

// ProxyConfig is the document a guest image reads to run egressd's forward proxy: listen on
// Port; with Auth, write it as the one line of the auth file. The libvirt and proxmox
// providers deliver it as egressd.json on the NoCloud seed, the gcp provider as the
// egressd-proxy metadata item. Auth is AuthFileLine's: never a password.
type ProxyConfig struct {
	V    int    `json:"v"`
	Name string `json:"name"`
	Port int    `json:"port"`
	Auth string `json:"auth,omitempty"`
}

// ProxyConfigOf is the document for an instance named name, listening on port, with auth.
func ProxyConfigOf(name string, port int, auth *Auth) ProxyConfig {
	return ProxyConfig{V: 1, Name: name, Port: port, Auth: AuthFileLine(auth)}
}
