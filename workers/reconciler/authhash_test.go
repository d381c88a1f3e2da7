package reconciler

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/egressd/egressd/schemas"
)

// authHash tells apart every change a create must deliver: none to static, static to lease
// and back, a new password; and it stays as it was for static pairs, so an upgrade re-delivers
// nothing.
func TestAuthHashSeesTheMode(t *testing.T) {
	lease := &schemas.Auth{Mode: schemas.AuthLease}
	static := &schemas.Auth{Username: "u", Password: "p"}
	explicit := &schemas.Auth{Mode: schemas.AuthStatic, Username: "u", Password: "p"}
	seen := map[string]string{}
	for name, a := range map[string]*schemas.Auth{"none": nil, "lease": lease, "static": static,
		"other password": {Username: "u", Password: "q"}} {
		h := authHash("uid-1", a)
		if prev, dup := seen[h]; dup {
			t.Errorf("%s and %s hash alike", name, prev)
		}
		seen[h] = name
	}
	if authHash("uid-1", static) != authHash("uid-1", explicit) {
		t.Error(`mode "" and "static" hash differently`)
	}
	if authHash("uid-1", lease) == authHash("uid-2", lease) {
		t.Error("the hash is not salted with the UID")
	}
	// The formula static pairs always had: statuses written before auth.mode keep their hash.
	old := sha256.Sum256([]byte("uid-1\x00u\x00p"))
	if authHash("uid-1", static) != hex.EncodeToString(old[:8]) {
		t.Error("a static pair's hash changed")
	}
}
