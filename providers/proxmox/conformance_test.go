package proxmox

import (
	"sync"
	"testing"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/providers/proxmox/pvetest"
)

func TestConformance(t *testing.T) {
	var sims sync.Map // providers.Provider → *pvetest.Server
	open := func(t *testing.T, sim *pvetest.Server) providers.Provider {
		p := newTestProvider(t, simConfig(t, sim), nil)
		sims.Store(providers.Provider(p), sim)
		return p
	}
	simOf := func(t *testing.T, p providers.Provider) *pvetest.Server {
		s, ok := sims.Load(p)
		if !ok {
			t.Fatal("provider not built by the harness")
		}
		return s.(*pvetest.Server)
	}
	providertest.Run(t, providertest.Harness{
		New:     func(t *testing.T) providers.Provider { return open(t, newSim(t, pvetest.Options{})) },
		Request: func(t *testing.T, name, uid string) providers.CreateRequest { return testRequest(name, uid) },
		MalformedIDs: []string{
			"vms/abc/egress-abc", "vms/99/egress-abc", "vms/0100000/egress-abc", "vms/100000/UPPER",
			"vm/100000/egress-abc", "vms/100000/", "vms//egress-abc", "vms/100000/egress-abc/x",
			"nodes/pv1-1/qemu/100000", "vms/-100000/egress-abc", "vms/1000000000/egress-abc",
		},
		Settle: func(t *testing.T, p providers.Provider, id string) providers.Instance { return settle(t, p, id) },
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider { return open(t, simOf(t, p)) },
		PlantUnmarked: func(t *testing.T, p providers.Provider) string {
			name := providers.InstanceName("someone-else", t.Name())
			if err := simOf(t, p).PutVM(testNode, 100, map[string]string{"name": name, "tags": tag,
				"description": "made by hand\negressd-uid=not-managed\n"}); err != nil {
				t.Fatal(err)
			}
			return name
		},
	})
}
