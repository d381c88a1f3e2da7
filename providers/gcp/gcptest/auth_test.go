package gcptest

import (
	"context"
	"net"
	"sync"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"
)

// With Auth, calls without the token are 401, and a service-account key file whose token_uri
// is the simulator's token endpoint gets the real client a token it accepts.
func TestServiceAccountToken(t *testing.T) {
	e := newEnv(t, 2) // its clients send no token
	file, auth, err := ServiceAccount(e.sim.URL(), project, "key-1", "token-1")
	if err != nil {
		t.Fatal(err)
	}
	e.sim.SetAuth(auth)
	_, err = e.ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: project, Zone: zoneA, Instance: "x"})
	wantAPIError(t, err, 401, ReasonAuthError)

	ic, err := compute.NewInstancesRESTClient(e.ctx, option.WithEndpoint(e.sim.URL()), option.WithAuthCredentialsJSON(option.ServiceAccount, file))
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	_, err = ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: project, Zone: zoneA, Instance: "x"})
	wantAPIError(t, err, 404, ReasonNotFound) // authorized: the instance is just not there
	if e.sim.TokensIssued() != 1 {
		t.Errorf("%d tokens issued, want 1", e.sim.TokensIssued())
	}
	// Another key: the old token is refused.
	_, other, err := ServiceAccount(e.sim.URL(), project, "key-2", "token-2")
	if err != nil {
		t.Fatal(err)
	}
	e.sim.SetAuth(other)
	_, err = ic.Get(e.ctx, &computepb.GetInstanceRequest{Project: project, Zone: zoneA, Instance: "x"})
	wantAPIError(t, err, 401, ReasonAuthError)
}

// EgressdImage boots each instance's proxy on the port, with the auth line, of its
// egressd-proxy metadata item; an instance without it runs with nothing listening.
func TestEgressdImageBoot(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var authFiles []string
	serve := func(ctx context.Context, ln net.Listener, authFile string) error {
		mu.Lock()
		authFiles = append(authFiles, authFile)
		mu.Unlock()
		return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String(), AuthFile: authFile})
	}
	sim, err := New(Options{Project: project, Zones: []string{zoneA}, Addresses: pool(2), Boot: EgressdImage(dir, serve), Delays: testDelays})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	ic, err := compute.NewInstancesRESTClient(context.Background(), option.WithEndpoint(sim.URL()), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	e := &env{sim: sim, ic: ic, ctx: context.Background()}
	req := instanceReq(zoneA, "booted", nil)
	req.InstanceResource.Metadata.Items = append(req.InstanceResource.Metadata.Items, &computepb.Items{Key: proto.String(ProxyMetadataKey),
		Value: proto.String(`{"v":1,"name":"booted","port":18192,"auth":"u:sha256:00:00"}`)})
	inst := e.insertRunning(t, req)
	if !refused(natIP(inst)+":18191") || refused(natIP(inst)+":18192") {
		t.Errorf("the proxy does not listen on the metadata's port 18192 only")
	}
	mu.Lock()
	if len(authFiles) != 1 || authFiles[0] == "" {
		t.Errorf("auth files %v, want the instance's own", authFiles)
	}
	mu.Unlock()
	bare := e.insertRunning(t, instanceReq(zoneA, "bare", nil))
	if bare.GetStatus() != StatusRunning || !refused(natIP(bare)+":18192") {
		t.Errorf("an instance without the item: %s, listening", bare.GetStatus())
	}
}

// zoneOperations.list filters on targetLink and operationType; Inserted counts instances
// made, not requestId replays.
func TestListOperationsAndInserted(t *testing.T) {
	e := newEnv(t, 2)
	req := instanceReq(zoneA, "ops", nil)
	req.RequestId = proto.String("5f0c2c3e-6f51-4ab0-9a8f-0a7c2e3b1d11")
	e.insertRunning(t, req)
	if _, err := e.ic.Insert(e.ctx, req); err != nil { // the same requestId: a replay
		t.Fatal(err)
	}
	if _, err := e.ic.Insert(e.ctx, instanceReq(zoneA, "other", nil)); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Inserted(); n != 2 {
		t.Errorf("Inserted = %d, want 2", n)
	}
	filter := `(targetLink = "` + selfLinkBase + "projects/" + project + "/zones/" + zoneA + `/instances/ops") AND (operationType = "insert")`
	it := e.zo.List(e.ctx, &computepb.ListZoneOperationsRequest{Project: project, Zone: zoneA, Filter: proto.String(filter)})
	var n int
	for {
		op, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if op.GetOperationType() != "insert" || op.GetTargetLink() != selfLinkBase+"projects/"+project+"/zones/"+zoneA+"/instances/ops" {
			t.Errorf("listed %v", op)
		}
		n++
	}
	if n != 1 {
		t.Errorf("%d operations listed, want the one insert", n)
	}
	// zoneOperations.delete: the operation is gone from get and list.
	first, err := e.zo.List(e.ctx, &computepb.ListZoneOperationsRequest{Project: project, Zone: zoneA, Filter: proto.String(filter)}).Next()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.zo.Delete(e.ctx, &computepb.DeleteZoneOperationRequest{Project: project, Zone: zoneA, Operation: first.GetName()}); err != nil {
		t.Fatal(err)
	}
	_, err = e.zo.Get(e.ctx, &computepb.GetZoneOperationRequest{Project: project, Zone: zoneA, Operation: first.GetName()})
	wantAPIError(t, err, 404, ReasonNotFound)
	if _, err := e.zo.List(e.ctx, &computepb.ListZoneOperationsRequest{Project: project, Zone: zoneA, Filter: proto.String(filter)}).Next(); err != iterator.Done {
		t.Errorf("a deleted operation is still listed: %v", err)
	}
	_, err = e.zo.List(e.ctx, &computepb.ListZoneOperationsRequest{Project: project, Zone: zoneA, Filter: proto.String("name = x")}).Next()
	wantAPIError(t, err, 400, ReasonInvalid)
}
