package local

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
)

func TestConformance(t *testing.T) {
	// Subtests run in parallel, each with its own provider, state dir, address block and port.
	var ports sync.Map // *testing.T → int
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providers.Provider {
			ports.Store(t, freePort(t))
			return newProvider(t, testConfig(t, 30))
		},
		Request: func(t *testing.T, name, uid string) providers.CreateRequest {
			port, ok := ports.Load(t)
			if !ok {
				t.Fatal("Request before New")
			}
			return providers.CreateRequest{
				Name: name, UID: uid, Installation: testInstallation, Proxy: "conformance",
				Host: "local", Port: port.(int),
			}
		},
		MalformedIDs: []string{
			"local/", "local/UPPER", "local/a/b", "local/..", "local/-x", "local/x-",
			"local/egress-abc/", "local//egress-abc", "kvm/egress-abc", "egress-abc",
			"local/" + string(make([]byte, 64)),
		},
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider {
			return reopen(t, p.(*Provider))
		},
		PlantUnmarked: func(t *testing.T, p providers.Provider) string {
			lp := p.(*Provider)
			name := providers.InstanceName("someone-else", t.Name())
			dir := lp.dir(name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			m := &meta{V: 1, ID: idOf(name), Name: name, UID: "foreign", Managed: false,
				CreatedAt: time.Now().UTC(), Address: "127.77.255.1", Port: 3128}
			if err := writeMeta(dir, m); err != nil {
				t.Fatal(err)
			}
			return name
		},
	})
}
