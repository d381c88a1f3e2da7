package providertest

import (
	"net"
	"strconv"

	"github.com/egressd/egressd/providers"
)

// A proxy of its own is rolled successor first (decision 98): a second instance of the same
// proxy (the same UID, another name, providers.SuccessorName) is built and serves beside the
// first, then the first is deleted once its leases end. Both must run at once on distinct
// endpoints, carry the proxy's UID, and deleting one must leave the other serving.
func testSuccessorBesideInstance(e *env) {
	req := e.request("succ")
	first := e.settle(e.create(req), req)

	next := req
	next.Name = providers.SuccessorName(installation, req.UID, "g2")
	next.Attempt = req.Attempt + "-successor"
	e.track(next.Name)
	second := e.settle(e.create(next), next)

	if first.ID == second.ID {
		e.t.Fatalf("the successor %s got its predecessor's ID %s", next.Name, first.ID)
	}
	a := net.JoinHostPort(first.Address, strconv.Itoa(first.Port))
	b := net.JoinHostPort(second.Address, strconv.Itoa(second.Port))
	if a == b {
		e.t.Errorf("the instance and its successor both serve on %s", a)
	}
	marks := map[string]providers.Marks{}
	for _, inst := range e.list() {
		marks[inst.ID] = inst.Marks
	}
	for _, inst := range []providers.Instance{first, second} {
		m, ok := marks[inst.ID]
		switch {
		case !ok:
			e.t.Errorf("List does not hold %s (%s)", inst.ID, inst.Name)
		case m.UID != req.UID:
			e.t.Errorf("List: %s carries UID %q, want the proxy's %q", inst.ID, m.UID, req.UID)
		}
	}

	e.delete(first.ID)
	e.gone(first.ID)
	if got := e.get(second.ID); got.State != providers.StateRunning {
		e.t.Errorf("the successor %s is %s after its predecessor was deleted, want Running", second.ID, got.State)
	}
	e.delete(second.ID)
	e.gone(second.ID)
}
