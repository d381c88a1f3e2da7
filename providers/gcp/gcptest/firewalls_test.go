package gcptest

import (
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Firewalls insert/get/delete, global, as
// https://cloud.google.com/compute/docs/reference/rest/v1/firewalls.
func TestFirewalls(t *testing.T) {
	e := newEnv(t, 1)
	rule := &computepb.Firewall{
		Name:         proto.String("egressd-proxy-3128"),
		Network:      proto.String("global/networks/default"),
		Allowed:      []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"3128"}}},
		TargetTags:   []string{"egressd-proxy"},
		SourceRanges: []string{"0.0.0.0/0"},
		Description:  proto.String("egressd-managed"),
	}
	op, err := e.fw.Insert(e.ctx, &computepb.InsertFirewallRequest{Project: project, FirewallResource: rule})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(e.ctx); err != nil || op.Proto().GetError() != nil {
		t.Fatalf("wait: %v %v", err, op.Proto().GetError())
	}
	got, err := e.fw.Get(e.ctx, &computepb.GetFirewallRequest{Project: project, Firewall: "egressd-proxy-3128"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetAllowed()[0].GetPorts()[0] != "3128" || got.GetTargetTags()[0] != "egressd-proxy" ||
		got.GetNetwork() != selfLinkBase+"projects/"+project+"/global/networks/default" || got.GetDirection() != "INGRESS" {
		t.Fatalf("rule = %v", got)
	}
	_, err = e.fw.Insert(e.ctx, &computepb.InsertFirewallRequest{Project: project, FirewallResource: rule})
	wantAPIError(t, err, 409, ReasonAlreadyExists)

	del, err := e.fw.Delete(e.ctx, &computepb.DeleteFirewallRequest{Project: project, Firewall: "egressd-proxy-3128"})
	if err != nil {
		t.Fatal(err)
	}
	if err := del.Wait(e.ctx); err != nil {
		t.Fatal(err)
	}
	_, err = e.fw.Get(e.ctx, &computepb.GetFirewallRequest{Project: project, Firewall: "egressd-proxy-3128"})
	wantAPIError(t, err, 404, ReasonNotFound)
	_, err = e.fw.Delete(e.ctx, &computepb.DeleteFirewallRequest{Project: project, Firewall: "egressd-proxy-3128"})
	wantAPIError(t, err, 404, ReasonNotFound)
}
