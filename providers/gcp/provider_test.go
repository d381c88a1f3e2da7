package gcp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/gcp/gcptest"
)

// A rotated key file is used from the next call on, without a new provider: the simulator
// accepts only the new key's token, and the provider's next Get works.
func TestRotatedCredentialsFileIsPickedUp(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	p := w.provider(t, nil)
	inst, err := p.Create(context.Background(), w.request("rotate"))
	if err != nil {
		t.Fatal(err)
	}
	w.rotate(t, "rotated-key", "rotated-token")
	if _, err := p.Get(context.Background(), inst.ID); err != nil {
		t.Fatalf("Get after the key file was rotated: %v", err)
	}
	if n := w.sim.TokensIssued(); n < 2 {
		t.Errorf("%d tokens issued, want one per key", n)
	}
}

// One zone unreachable: List fails rather than answer a partial view (orphan GC would take
// the missing zone's instances for gone), and Check says which zone.
func TestListFailsWhenAZoneIsUnreachable(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	p := w.provider(t, nil)
	inst, err := p.Create(context.Background(), w.request("partial"))
	if err != nil {
		t.Fatal(err)
	}
	if list, err := p.List(context.Background()); err != nil || len(list) != 1 || list[0].ID != inst.ID {
		t.Fatalf("List = %v, %v; want the one instance", list, err)
	}
	if err := w.sim.SetUnreachable(zoneB, true); err != nil {
		t.Fatal(err)
	}
	list, err := p.List(context.Background())
	if err == nil || !errors.Is(err, errPartialList) || !strings.Contains(err.Error(), zoneB) {
		t.Fatalf("List with %s unreachable = %v, %v; want an error naming the zone", zoneB, list, err)
	}
	if !errors.Is(err, providers.ErrTransient) {
		t.Errorf("class %v, want Transient", providers.ClassOf(err))
	}
	verdicts := p.Check(context.Background())
	if len(verdicts) != 2 || !verdicts[0].Ready || verdicts[1].Ready || verdicts[1].Reason != ReasonZoneUnreachable {
		t.Errorf("Check = %+v, want %s ready and %s ZoneUnreachable", verdicts, zoneA, zoneB)
	}
	// The partial-success shape: the zone left out of the items and named only in the
	// answer's unreachables, under its PARTIAL_SUCCESS warning. Still a failure, and the
	// collector's users of a firewall rule are not counted from it either.
	w.sim.SetUnreachableShape(gcptest.UnreachableOmitted)
	for what, call := range map[string]func() error{
		"List":      func() error { _, err := p.List(context.Background()); return err },
		"Leftovers": func() error { _, err := p.Leftovers(context.Background()); return err },
	} {
		if err := call(); !errors.Is(err, errPartialList) || !strings.Contains(err.Error(), "zones/"+zoneB) {
			t.Errorf("%s with %s only in unreachables = %v; want an error naming the zone", what, zoneB, err)
		}
	}
	verdicts = p.Check(context.Background())
	if len(verdicts) != 2 || !verdicts[0].Ready || verdicts[1].Ready || verdicts[1].Reason != ReasonZoneUnreachable {
		t.Errorf("Check with %s only in unreachables = %+v, want it ZoneUnreachable", zoneB, verdicts)
	}
}

// The proxy port is opened by one rule per network and port that egressd owns: made with the
// first instance, shared by the next, kept while one uses it, deleted with the last.
func TestFirewallRuleFollowsItsInstances(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	p := w.provider(t, nil)
	ctx := context.Background()
	c, release, err := p.clients.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	rule := p.ruleName(testInstallation, w.port)
	ruleExists := func() bool {
		_, err := c.fw.Get(ctx, &computepb.GetFirewallRequest{Project: testProject, Firewall: rule})
		if err != nil && !isCode(err, http.StatusNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	a, err := p.Create(ctx, w.request("fw-a"))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := c.fw.Get(ctx, &computepb.GetFirewallRequest{Project: testProject, Firewall: rule})
	if err != nil {
		t.Fatalf("no rule %s after the first Create: %v", rule, err)
	}
	if got := fw.GetAllowed(); len(got) != 1 || got[0].GetIPProtocol() != "tcp" || len(got[0].GetPorts()) != 1 || got[0].GetPorts()[0] != strconv.Itoa(w.port) {
		t.Errorf("rule allows %v, want tcp:%d", got, w.port)
	}
	if fw.GetTargetTags()[0] != rule || fw.GetSourceRanges()[0] != "127.0.0.0/8" || !strings.Contains(fw.GetDescription(), testInstallation) {
		t.Errorf("rule = %v", fw)
	}
	inst, err := c.inst.Get(ctx, &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: a.Name})
	if err != nil {
		t.Fatal(err)
	}
	if tags := inst.GetTags().GetItems(); len(tags) != 1 || tags[0] != rule {
		t.Errorf("instance tags %v, want the rule's tag %s", tags, rule)
	}
	bReq := w.request("fw-b")
	bReq.Host = zoneB
	b, err := p.Create(ctx, bReq)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if !ruleExists() {
		t.Fatal("the rule was deleted while another instance uses it")
	}
	if err := p.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if ruleExists() {
		t.Error("the rule outlived its last instance")
	}
	// A rule of that name that egressd did not make is refused, not used or deleted.
	if _, err := c.fw.Insert(ctx, &computepb.InsertFirewallRequest{Project: testProject, FirewallResource: &computepb.Firewall{
		Name: proto.String(rule), Description: proto.String("someone's")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, w.request("fw-c")); !errors.Is(err, providers.ErrPermanent) || !errors.Is(err, errForeignFirewall) {
		t.Errorf("Create with a foreign rule of the name: %v, want Permanent", err)
	}
}

// With firewall.manage false no rule is made and instances carry only the configured tags.
func TestUnmanagedFirewall(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	cfg := w.config()
	off := false
	cfg.Firewall = FirewallConfig{Manage: &off}
	cfg.NetworkTags = []string{"proxies"}
	p := w.providerWith(t, cfg, nil)
	inst, err := p.Create(context.Background(), w.request("nofw"))
	if err != nil {
		t.Fatal(err)
	}
	c, release, _ := p.clients.get(context.Background())
	defer release()
	got, err := c.inst.Get(context.Background(), &computepb.GetInstanceRequest{Project: testProject, Zone: zoneA, Instance: inst.Name})
	if err != nil {
		t.Fatal(err)
	}
	if tags := got.GetTags().GetItems(); len(tags) != 1 || tags[0] != "proxies" || got.GetLabels()[labelFirewall] != "" {
		t.Errorf("tags %v, labels %v", tags, got.GetLabels())
	}
	if _, err := c.fw.Get(context.Background(), &computepb.GetFirewallRequest{Project: testProject,
		Firewall: p.ruleName(testInstallation, w.port)}); !isCode(err, http.StatusNotFound) {
		t.Errorf("a rule exists: %v", err)
	}
}

// The VM's proxy serves on the requested port and enforces the credential, delivered as the
// egressd-proxy metadata item (a salted hash; the image writes it to the proxy's auth file).
func TestProxyServesWithTheRequestedAuth(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer site.Close()
	w := newWorld(t, gcptest.Options{})
	p := w.provider(t, nil)
	req := w.request("auth")
	req.Auth = &providers.Auth{Username: "crawler", Password: "s3cret"}
	inst := settle(t, p, mustCreate(t, p, req).ID)
	if inst.Port != w.port || inst.EgressIP != inst.Address {
		t.Errorf("instance %+v, want port %d and the natIP as egress", inst, w.port)
	}
	for _, c := range []struct {
		user *url.Userinfo
		want int
	}{{nil, http.StatusProxyAuthRequired}, {url.UserPassword("crawler", "wrong"), http.StatusProxyAuthRequired}, {url.UserPassword("crawler", "s3cret"), http.StatusOK}} {
		proxy := &url.URL{Scheme: "http", Host: inst.Address + ":" + strconv.Itoa(inst.Port), User: c.user}
		tr := &http.Transport{Proxy: http.ProxyURL(proxy)}
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(site.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		tr.CloseIdleConnections()
		if resp.StatusCode != c.want {
			t.Errorf("through the proxy as %v: %d, want %d", c.user, resp.StatusCode, c.want)
		}
	}
	md, err := readMetadata(t, p, inst)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := ReadProxyConfig(md)
	if err != nil || pc.Port != w.port || !strings.HasPrefix(pc.Auth, "crawler:sha256:") || strings.Contains(md[MetadataProxy], "s3cret") {
		t.Errorf("egressd-proxy = %+v, %v", pc, err)
	}
	if md[MetadataUserData] != string(req.UserData) {
		t.Errorf("user-data = %q", md[MetadataUserData])
	}
}

func mustCreate(t *testing.T, p *Provider, req providers.CreateRequest) providers.Instance {
	t.Helper()
	inst, err := p.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

func readMetadata(t *testing.T, p *Provider, inst providers.Instance) (map[string]string, error) {
	c, release, err := p.clients.get(context.Background())
	if err != nil {
		return nil, err
	}
	defer release()
	got, err := c.inst.Get(context.Background(), &computepb.GetInstanceRequest{Project: testProject, Zone: inst.Host, Instance: inst.Name})
	if err != nil {
		return nil, err
	}
	md := map[string]string{}
	for _, it := range got.GetMetadata().GetItems() {
		md[it.GetKey()] = it.GetValue()
	}
	return md, nil
}

// A preempted Spot VM: with STOP it is TERMINATED, which is Terminated (the reconciler
// replaces it); with DELETE it is gone, NotFound (created again).
func TestSpotPreemption(t *testing.T) {
	for _, c := range []struct {
		action string
		want   providers.State
	}{{TerminationStop, providers.StateTerminated}, {TerminationDelete, ""}} {
		t.Run(c.action, func(t *testing.T) {
			w := newWorld(t, gcptest.Options{})
			cfg := w.config()
			cfg.Spot = &SpotConfig{InstanceTerminationAction: c.action}
			p := w.providerWith(t, cfg, nil)
			inst := settle(t, p, mustCreate(t, p, w.request("spot")).ID)
			if err := w.sim.Preempt(zoneA, inst.Name); err != nil {
				t.Fatal(err)
			}
			got, err := p.Get(context.Background(), inst.ID)
			switch {
			case c.want == "" && !errors.Is(err, providers.ErrNotFound):
				t.Errorf("Get after preemption = %v, %v; want NotFound", got.State, err)
			case c.want != "" && (err != nil || got.State != c.want || got.Address != ""):
				t.Errorf("Get after preemption = %+v, %v; want %s without address", got, err, c.want)
			}
		})
	}
}

// Delete refuses an instance without egressd's mark, and Create will not adopt it.
func TestUnmarkedInstancesAreLeftAlone(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	p := w.provider(t, nil)
	req := w.request("unmarked")
	plantUnmarked(t, w, p, zoneA, req.Name)
	if _, err := p.Create(context.Background(), req); !errors.Is(err, providers.ErrPermanent) || !errors.Is(err, errForeign) {
		t.Errorf("Create over an unmarked instance: %v, want Permanent", err)
	}
	if err := p.Delete(context.Background(), idFor(zoneA, req)); !errors.Is(err, providers.ErrPermanent) || !errors.Is(err, errNotOurs) {
		t.Errorf("Delete of an unmarked instance: %v, want Permanent", err)
	}
}

// With externalIP none the proxy's address is the internal one, and there is no egress IP
// the provider knows (Cloud NAT's).
func TestInternalAddressOnly(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	cfg := w.config()
	cfg.ExternalIP = ExternalIPNone
	p := w.providerWith(t, cfg, nil)
	inst := settle(t, p, mustCreate(t, p, w.request("internal")).ID)
	if !isIP(inst.Address) || inst.EgressIP != "" {
		t.Errorf("instance %+v, want the networkIP and no egress IP", inst)
	}
}

// A rule no instance uses (its only instance's insert failed) is a leftover, under the first
// zone; Delete of its ID removes it, and refuses while an instance uses it again.
func TestLeftoverFirewallRules(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	p := w.provider(t, nil)
	ctx := context.Background()
	w.sim.FailInserts(zoneA, gcptest.FaultQuota)
	if _, err := p.Create(ctx, w.request("lo-a")); !errors.Is(err, providers.ErrQuota) {
		t.Fatalf("Create: %v, want the quota refusal", err)
	}
	list, err := p.Leftovers(ctx)
	rule := p.ruleName(testInstallation, w.port)
	if err != nil || len(list) != 1 || list[0].ID != "firewalls/"+rule || list[0].Host != zoneA || list[0].Name != rule || list[0].ModifiedAt.IsZero() {
		t.Fatalf("Leftovers = %+v, %v; want the unused rule %s", list, err, rule)
	}
	// Used again: not a leftover, and Delete of its ID keeps it.
	inst := mustCreate(t, p, w.request("lo-b"))
	if list, err := p.Leftovers(ctx); err != nil || len(list) != 0 {
		t.Errorf("Leftovers with the rule in use = %+v, %v", list, err)
	}
	if err := p.Delete(ctx, "firewalls/"+rule); err != nil {
		t.Fatal(err)
	}
	c, release, _ := p.clients.get(ctx)
	defer release()
	if _, err := c.fw.Get(ctx, &computepb.GetFirewallRequest{Project: testProject, Firewall: rule}); err != nil {
		t.Fatalf("the rule in use was deleted: %v", err)
	}
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.fw.Get(ctx, &computepb.GetFirewallRequest{Project: testProject, Firewall: rule}); !isCode(err, http.StatusNotFound) {
		t.Errorf("the rule outlived its instance: %v", err)
	}
	for _, id := range []string{"firewalls/", "firewalls/Bad", "firewalls/default-allow-ssh"} {
		if err := p.Delete(ctx, id); !errors.Is(err, providers.ErrPermanent) {
			t.Errorf("Delete(%q) = %v, want Permanent", id, err)
		}
	}
	if _, err := p.Get(ctx, "firewalls/"+rule); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Get of a rule's ID = %v, want Permanent", err)
	}
}

// A Delete does not collect the rule while a Create of this process that needs it is in
// flight (its VM may not be listed yet); the rule is then a leftover for the collector.
func TestRuleKeptForACreateInFlight(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	p := w.provider(t, nil)
	ctx := context.Background()
	a := mustCreate(t, p, w.request("inflight"))
	rule := p.ruleName(testInstallation, w.port)
	done := p.ruleUsers.hold(rule) // as a Create between its insert and its VM being listed
	if err := p.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := w.sim.Firewalls(); len(got) != 1 || got[0] != rule {
		t.Fatalf("rules %v: the rule was collected under a Create in flight", got)
	}
	done()
	if list, err := p.Leftovers(ctx); err != nil || len(list) != 1 || list[0].Name != rule {
		t.Fatalf("Leftovers = %+v, %v; want the rule", list, err)
	}
}
