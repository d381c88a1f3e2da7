package libvirt

import (
	"context"
	"sync"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
)

func TestConformance(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	var clouds sync.Map // providers.Provider → *fakeCloud
	open := func(t *testing.T, cloud *fakeCloud) providers.Provider {
		p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
		clouds.Store(providers.Provider(p), cloud)
		return p
	}
	cloudOf := func(t *testing.T, p providers.Provider) *fakeCloud {
		c, ok := clouds.Load(p)
		if !ok {
			t.Fatal("provider not built by the harness")
		}
		return c.(*fakeCloud)
	}
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providers.Provider { return open(t, newFakeCloud()) },
		Request: func(t *testing.T, name, uid string) providers.CreateRequest {
			return providers.CreateRequest{Name: name, UID: uid, Installation: testInstallation,
				Proxy: "conformance", Host: "h1", Port: 3128}
		},
		MalformedIDs: []string{
			"hosts/h1/domains/", "hosts/h1/domains/UPPER", "hosts//domains/egress-abc",
			"hosts/h1/domain/egress-abc", "host/h1/domains/egress-abc", "hosts/h1/domains/a/b",
			"hosts/nope/domains/egress-abc", "local/egress-abc", "egress-abc",
		},
		Settle: func(t *testing.T, p providers.Provider, id string) providers.Instance {
			deadline := time.Now().Add(10 * time.Second)
			for {
				inst, err := p.Get(context.Background(), id)
				if err == nil && inst.State == providers.StateRunning {
					return inst
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s not Running: %v %v", id, inst.State, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		},
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider { return open(t, cloudOf(t, p)) },
		PlantUnmarked: func(t *testing.T, p providers.Provider) string {
			name := providers.InstanceName("someone-else", t.Name())
			cloudOf(t, p).with(func(f *fakeCloud) {
				f.hosts["h1"].domains[name] = &fakeDomain{name: name, state: golibvirt.DomainRunning, meta: map[string]string{
					"https://example.com/other": "<instance><managed>true</managed></instance>"}}
			})
			return name
		},
	})
}
