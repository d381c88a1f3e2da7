package gcptest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"
)

const (
	project   = "egressd-test"
	zoneA     = "us-central1-a"
	zoneB     = "europe-west6-b"
	proxyPort = 18091 // on 127.0.91.x, this helper's loopback net
)

// env is a simulator and the real SDK clients pointed at it, as the provider will build them
// (option.WithEndpoint and option.WithoutAuthentication).
type env struct {
	sim *Server
	ic  *compute.InstancesClient
	zo  *compute.ZoneOperationsClient
	fw  *compute.FirewallsClient
	ctx context.Context
}

func pool(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{127, 0, 91, byte(i + 1)})
	}
	return out
}

// testDelays keep every asynchronous step visible yet short.
var testDelays = Delays{Pending: 10 * time.Millisecond, Provisioning: 20 * time.Millisecond,
	Staging: 20 * time.Millisecond, Stopping: 10 * time.Millisecond}

// serveForwardProxy runs egressd's own forward proxy, the one a real VM's image runs.
func serveForwardProxy(ctx context.Context, ln net.Listener) error {
	return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String()})
}

func newEnv(t *testing.T, addresses int) *env {
	t.Helper()
	sim, err := New(Options{Project: project, Zones: []string{zoneA, zoneB}, Addresses: pool(addresses),
		ProxyPort: proxyPort, Serve: serveForwardProxy, Delays: testDelays})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	opts := []option.ClientOption{option.WithEndpoint(sim.URL()), option.WithoutAuthentication()}
	ic, err := compute.NewInstancesRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	zo, err := compute.NewZoneOperationsRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := compute.NewFirewallsRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ic.Close()
		zo.Close()
		fw.Close()
		sim.Close()
		cancel()
	})
	return &env{sim: sim, ic: ic, zo: zo, fw: fw, ctx: ctx}
}

// instanceReq is the insert body of the public reference (from
// https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert).
func instanceReq(zone, name string, labels map[string]string) *computepb.InsertInstanceRequest {
	return &computepb.InsertInstanceRequest{Project: project, Zone: zone, InstanceResource: &computepb.Instance{
		Name:        proto.String(name),
		MachineType: proto.String("zones/" + zone + "/machineTypes/e2-small"),
		Labels:      labels,
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String("projects/debian-cloud/global/images/family/debian-12")}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"),
			AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("External NAT"), Type: proto.String("ONE_TO_ONE_NAT")}}}},
		Metadata: &computepb.Metadata{Items: []*computepb.Items{{Key: proto.String("user-data"), Value: proto.String("#cloud-config\n")}}},
	}}
}

// insertRunning inserts and waits for the operation, failing the test on any error.
func (e *env) insertRunning(t *testing.T, req *computepb.InsertInstanceRequest) *computepb.Instance {
	t.Helper()
	op, err := e.ic.Insert(e.ctx, req)
	if err != nil {
		t.Fatalf("insert %s: %v", req.GetInstanceResource().GetName(), err)
	}
	if err := op.Wait(e.ctx); err != nil {
		t.Fatalf("wait insert %s: %v", req.GetInstanceResource().GetName(), err)
	}
	if oe := op.Proto().GetError(); oe != nil {
		t.Fatalf("insert %s operation failed: %v", req.GetInstanceResource().GetName(), oe)
	}
	return e.get(t, req.GetZone(), req.GetInstanceResource().GetName())
}

func (e *env) get(t *testing.T, zone, name string) *computepb.Instance {
	t.Helper()
	inst, err := e.ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: project, Zone: zone, Instance: name})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return inst
}

// wantAPIError checks err is a *googleapi.Error with code and (when not "") reason.
func wantAPIError(t *testing.T, err error, code int, reason string) *googleapi.Error {
	t.Helper()
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		t.Fatalf("error %v (%T) is not a *googleapi.Error", err, err)
	}
	if ge.Code != code {
		t.Fatalf("code = %d, want %d (%v)", ge.Code, code, err)
	}
	if reason != "" {
		if len(ge.Errors) == 0 || ge.Errors[0].Reason != reason {
			t.Fatalf("reasons = %+v, want %q", ge.Errors, reason)
		}
	}
	return ge
}

func (e *env) wantGone(t *testing.T, zone, name string) {
	t.Helper()
	_, err := e.ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: project, Zone: zone, Instance: name})
	wantAPIError(t, err, 404, ReasonNotFound)
}

func natIP(inst *computepb.Instance) string {
	for _, nic := range inst.GetNetworkInterfaces() {
		for _, ac := range nic.GetAccessConfigs() {
			if ac.GetNatIP() != "" {
				return ac.GetNatIP()
			}
		}
	}
	return ""
}

func proxyAddr(ip string) string { return fmt.Sprintf("%s:%d", ip, proxyPort) }
