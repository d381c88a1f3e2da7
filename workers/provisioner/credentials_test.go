package provisioner

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/schemas"
)

// What a create delivers for each auth: nothing, the static pair, or the proxy's own lease
// key (the one its tokens verify with, and no other proxy's); without a master a lease-mode
// create is permanent, not retried.
func TestCredentials(t *testing.T) {
	master := leaseauth.NewMaster()
	op := events.Op{Proxy: "p1", InstanceName: "egress-p1", Generation: "g2"}
	p := &Provisioner{cfg: Config{Provider: "local", LeaseMaster: master}}

	if a, err := p.credentials(op, nil); a != nil || err != nil {
		t.Fatalf("no auth: %v %v", a, err)
	}
	a, err := p.credentials(op, &schemas.Auth{Username: "u", Password: "pw"})
	if err != nil || a.Lease() || a.Username != "u" || a.Password.Reveal() != "pw" {
		t.Fatalf("static: %v", err)
	}
	a, err = p.credentials(op, &schemas.Auth{Mode: schemas.AuthLease})
	if err != nil || !a.Lease() || a.Username != "" {
		t.Fatalf("lease: %v", err)
	}
	k, err := leaseauth.ParseFileLine(a.LeaseKey.Reveal())
	if err != nil || k.Proxy() != "p1" || k.Instance() != "g2" {
		t.Fatalf("the lease key line: %v", err)
	}
	user, pass := master.InstanceKey("p1", "g2").Sign("p1.0.0123456789abcdef", time.Now().Add(60e9))
	if err := k.Verify(user, pass, time.Now()); err != nil {
		t.Fatalf("the delivered key refuses the leaser's tokens: %v", err)
	}
	user, pass = master.ProxyKey("p2").Sign("p2.0.0123456789abcdef", time.Now().Add(60e9))
	if k.Verify(user, pass, time.Now()) == nil {
		t.Fatal("the delivered key accepts another proxy's tokens")
	}
	user, pass = master.InstanceKey("p1", "g1").Sign("p1.0.0123456789abcdef", time.Now().Add(60e9))
	if !errors.Is(k.Verify(user, pass, time.Now()), leaseauth.ErrInstance) {
		t.Fatal("the delivered key accepts the tokens of the proxy's previous instance")
	}
	if s := fmt.Sprintf("%v %+v", a, *a); strings.Contains(s, strings.Split(a.LeaseKey.Reveal(), ":")[4][:20]) {
		t.Fatalf("the key prints: %s", s)
	}

	none := &Provisioner{cfg: Config{Provider: "local"}}
	if _, err := none.credentials(op, &schemas.Auth{Mode: schemas.AuthLease}); !errors.Is(err, providers.ErrPermanent) {
		t.Fatalf("lease without a master: %v, want permanent", err)
	}
}
