package leaser

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// tokenBytes is the size of a lease token: 64 bits tell grants of one slot apart for good
// and make an ID of someone else's lease impractical to guess.
const tokenBytes = 8

// leaseID names one grant of a slot.
type leaseID struct {
	Proxy string
	Slot  int
	Token string
}

func (id leaseID) String() string { return events.SlotKey(id.Proxy, id.Slot) + "." + id.Token }

// newToken returns a fresh random lease token.
func newToken() string {
	b := make([]byte, tokenBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// errMalformedID is why an ID does not parse; the service answers 400 naming "id".
var errMalformedID = errors.New("must be <proxy>.<slot>.<token> as returned by acquire")

// parseLeaseID parses <proxy>.<slot>.<token>. Proxy names are DNS-1123 labels and so hold no
// dot; the slot is canonical (no sign, no leading zero) so one lease has exactly one ID.
func parseLeaseID(s string) (leaseID, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || schemas.ValidName(parts[0]) != nil || !validToken(parts[2]) {
		return leaseID{}, errMalformedID
	}
	slot, ok := events.ParseSlot(parts[1])
	if !ok {
		return leaseID{}, errMalformedID
	}
	return leaseID{Proxy: parts[0], Slot: slot, Token: parts[2]}, nil
}

// parseSlotKey splits a proxy_leases key into proxy and slot (events.ParseSlotKey), with a
// proxy name that is valid, not only dot-free.
func parseSlotKey(key string) (string, int, bool) {
	proxy, slot, ok := events.ParseSlotKey(key)
	if !ok || schemas.ValidName(proxy) != nil {
		return "", 0, false
	}
	return proxy, slot, true
}

func validToken(s string) bool {
	if len(s) != 2*tokenBytes {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Cooldown keys in proxy_cooldowns: <proxy> cools a proxy down for every target, and
// <proxy>.<b64url(target)> for one. Targets are arbitrary strings (host names with ports,
// URLs); base64url without padding keeps them within the KV key alphabet.
func globalCooldownKey(proxy string) string { return proxy }

func targetCooldownKey(proxy, target string) string {
	return proxy + "." + base64.RawURLEncoding.EncodeToString([]byte(target))
}

// parseCooldownKey splits a proxy_cooldowns key; target is "" for a global cooldown.
func parseCooldownKey(key string) (proxy, target string, ok bool) {
	proxy, enc, dotted := strings.Cut(key, ".")
	if schemas.ValidName(proxy) != nil {
		return "", "", false
	}
	if !dotted {
		return proxy, "", true
	}
	t, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(t) == 0 {
		return "", "", false
	}
	return proxy, string(t), true
}
