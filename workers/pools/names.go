package pools

import (
	"crypto/rand"

	"github.com/egressd/egressd/schemas"
)

// suffixAlphabet has no vowels (no words) and no look-alikes (0/o, 1/l), as Kubernetes'.
const suffixAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// newSuffix is a random member suffix of schemas.MemberSuffixLen characters.
func newSuffix() string {
	b := make([]byte, schemas.MemberSuffixLen)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = suffixAlphabet[int(b[i])%len(suffixAlphabet)]
	}
	return string(b)
}

// memberName is <pool>-<suffix>.
func memberName(pool, suffix string) string { return pool + "-" + suffix }
