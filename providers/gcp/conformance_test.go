package gcp

import (
	"sync"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
)

// The conformance suite, against the simulator through the real SDK client, with a
// service-account key the client reads and exchanges for a token at the simulator.
func TestConformance(t *testing.T) {
	var worlds sync.Map // providers.Provider → *world
	open := func(t *testing.T, w *world) providers.Provider {
		p := w.provider(t, nil)
		worlds.Store(providers.Provider(p), w)
		return p
	}
	worldOf := func(t *testing.T, p providers.Provider) *world {
		w, ok := worlds.Load(p)
		if !ok {
			t.Fatal("provider not built by the harness")
		}
		return w.(*world)
	}
	var ports sync.Map // *testing.T → port
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providers.Provider {
			w := newWorld(t, gcptestOptions())
			ports.Store(t, w.port)
			return open(t, w)
		},
		Request: func(t *testing.T, name, uid string) providers.CreateRequest {
			port, _ := ports.Load(t)
			return providers.CreateRequest{Name: name, UID: uid, Installation: testInstallation,
				Proxy: "conformance", Host: zoneA, Port: port.(int)}
		},
		MalformedIDs: []string{
			"zones/us-central1-a/instances/", "zones/us-central1-a/instances/UPPER", "zones//instances/egress-abc",
			"zones/us-central1-a/instance/egress-abc", "zone/us-central1-a/instances/egress-abc",
			"zones/us-central1-a/instances/a/b", "zones/nowhere-zone-z/instances/egress-abc",
			"zones/us-central1-a/instances/egress-abc/operations/operation-1", "hosts/h1/domains/egress-abc", "egress-abc",
		},
		Settle:     func(t *testing.T, p providers.Provider, id string) providers.Instance { return settle(t, p, id) },
		Reopen:     func(t *testing.T, p providers.Provider) providers.Provider { return open(t, worldOf(t, p)) },
		DeleteWait: 0,
		PlantUnmarked: func(t *testing.T, p providers.Provider) string {
			w := worldOf(t, p)
			name := providers.InstanceName("someone-else", t.Name())
			plantUnmarked(t, w, p.(*Provider), zoneA, name)
			return name
		},
	})
}

// plantUnmarked inserts an instance without egressd's marks (another tool's VM).
func plantUnmarked(t *testing.T, w *world, p *Provider, zone, name string) {
	t.Helper()
	c, release, err := p.clients.get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	op, err := c.inst.Insert(t.Context(), &computepb.InsertInstanceRequest{Project: testProject, Zone: zone,
		InstanceResource: &computepb.Instance{Name: proto.String(name), MachineType: proto.String("zones/" + zone + "/machineTypes/e2-small"),
			Labels: map[string]string{"other-managed": "true"},
			Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String("projects/debian-cloud/global/images/family/debian-12")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitOp(t.Context(), op); err != nil {
		t.Fatal(err)
	}
}
