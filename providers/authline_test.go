package providers

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// The auth line holds a password's salted hash, never the password, with a fresh salt each
// time; a lease key goes as its own line.
func TestAuthFileLine(t *testing.T) {
	if got := AuthFileLine(nil); got != "" {
		t.Errorf("no auth: %q", got)
	}
	a := &Auth{Username: "crawler", Password: "s3cret"}
	line := AuthFileLine(a)
	parts := strings.Split(line, ":")
	if len(parts) != 4 || parts[0] != "crawler" || parts[1] != "sha256" || strings.Contains(line, "s3cret") {
		t.Fatalf("line %q", line)
	}
	salt, _ := hex.DecodeString(parts[2])
	sum := sha256.Sum256(append(salt, "s3cret"...))
	if hex.EncodeToString(sum[:]) != parts[3] {
		t.Errorf("the hash is not sha256(salt + password)")
	}
	if AuthFileLine(a) == line {
		t.Errorf("the same salt twice")
	}
	if got := AuthFileLine(&Auth{LeaseKey: "p1:lease:abc\n"}); got != "p1:lease:abc" {
		t.Errorf("lease key line %q", got)
	}
}
