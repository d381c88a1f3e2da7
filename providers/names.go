package providers

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

var nameEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// InstanceName is the deterministic name of the instance of the proxy with this UID in this
// installation: "egress-" and 16 lowercase base32 characters, a valid DNS label. Two
// installations sharing a backend never produce the same name for their proxies.
func InstanceName(installation, uid string) string {
	sum := sha256.Sum256([]byte(installation + "/" + uid))
	return "egress-" + strings.ToLower(nameEncoding.EncodeToString(sum[:]))[:16]
}
