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
// (one more stat per request; the list is parsed once per change).
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
	user, pass := key.Sign("p1.0.00000000000000aa", time.Now().Add(time.Hour))
	log := slog.New(slog.DiscardHandler)
	for name, a := range map[string]*FileAuthenticator{
		"key only":             NewFileAuthenticator(authFile, log),
		"with 10k revocations": NewFileAuthenticator(authFile, log).WithRevocations(revFile),
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if a.Check(user, pass) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}
