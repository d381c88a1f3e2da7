package providers

import (
	"crypto/sha256"
	"encoding/base32"
	"regexp"
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

// SuccessorName is the name of a successor instance of the proxy with this UID: the one
// built beside its running instance when a change needs a new one (decision 98), named by
// the generation the reconciler records for it before the create is sent, so that a create
// sent again after a crash makes the same instance. It has InstanceName's form, so every
// provider takes it as it takes that; the instance carries the proxy's UID in its marks like
// the first, which keeps the orphan collector off it.
func SuccessorName(installation, uid, generation string) string {
	return InstanceName(installation, uid+"/"+generation)
}

// PickKey resolves a placement key (machine type, image) against a provider's config: an
// empty key means the only entry, when there is exactly one.
func PickKey[V any](key string, m map[string]V) (string, bool) {
	if key == "" && len(m) == 1 {
		for k := range m {
			return k, true
		}
	}
	_, ok := m[key]
	return key, ok
}

var (
	dnsLabel   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	identifier = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
)

// ValidName reports whether s is a DNS-1123 label of at most 63 characters: what instance,
// provider and host names are, so that they fit IDs, lock keys and backend names.
func ValidName(s string) bool { return len(s) <= 63 && dnsLabel.MatchString(s) }

// ValidKey reports whether s may be a config key that reaches backend names (an image, a
// machine type): letters, digits, '_', '.' and '-', not at the ends, no "..", at most 63.
func ValidKey(s string) bool {
	return len(s) <= 63 && identifier.MatchString(s) && !strings.Contains(s, "..")
}
