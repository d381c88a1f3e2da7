package forwardproxy

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/leaseauth"
)

// The cost of a lease token's check at the proxy, per request: the key alone (no revocation
// list, as before revocation existed), and with a revocation list of 10,000 entries on disk
// (one more stat per request; the list is parsed once per change); and during a master
// rotation, a key file of two masters and a token of the second (decision 88).
func BenchmarkLeaseCheck(b *testing.B) {
	dir := b.TempDir()
	authFile, revFile := filepath.Join(dir, "auth"), filepath.Join(dir, "revoked")
	key := leaseauth.NewMaster().InstanceKey("p1", "g1")
	if err := WriteLeaseKeyFile(authFile, key.FileLine()); err != nil {
		b.Fatal(err)
	}
	var list leaseauth.Revocations
	for i := range 10000 {
		list.Add(fmt.Sprintf("p1.%d.%016x", i%4, i), time.Now().Add(time.Hour))
	}
	if err := WriteRevocationsFile(revFile, &list); err != nil {
		b.Fatal(err)
	}
	next := leaseauth.NewMaster().InstanceKey("p1", "g1")
	twoFile := filepath.Join(dir, "auth2")
	if err := WriteLeaseKeyFile(twoFile, leaseauth.FileLines(key, next)); err != nil {
		b.Fatal(err)
	}
	user, pass := key.Sign("p1.0.00000000000000aa", time.Now().Add(time.Hour))
	_, pass2 := next.Sign("p1.0.00000000000000aa", time.Now().Add(time.Hour))
	log := slog.New(slog.DiscardHandler)
	for name, c := range map[string]struct {
		a    *FileAuthenticator
		pass string
	}{
		"key only":                        {NewFileAuthenticator(authFile, log), pass},
		"with 10k revocations":            {NewFileAuthenticator(authFile, log).WithRevocations(revFile), pass},
		"two masters, the second's token": {NewFileAuthenticator(twoFile, log), pass2},
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if c.a.Check(user, c.pass) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}
