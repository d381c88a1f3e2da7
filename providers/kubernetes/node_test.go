package kubernetes

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/providers"
)

// Mode node over three nodes (127.0.105.1–3 as their ExternalIPs, with a real forward proxy
// per pod, run by the test's kubelet): three proxies land one per node, each reporting its
// node's address, and a site sees each one's traffic leave from that address; a fourth waits
// (Quota, saying why) until a node joins; a node that disappears makes its proxy Terminated,
// and the replacement lands on another node.
func TestModeNodeOneProxyPerNode(t *testing.T) {
	needCluster(t)
	ns := namespace(t)
	startKubelet(t, ns, ModeNode)
	group := uniq("egress")
	sel := map[string]string{"egressd.test/group": group}
	nodes := map[string]string{} // address → node
	for i := 1; i <= 3; i++ {
		name, ip := fmt.Sprintf("%s-n%d", group, i), fmt.Sprintf("127.0.105.%d", i)
		makeNode(t, name, ip, sel)
		nodes[ip] = name
	}
	p := newProvider(t, "nodes", testConfig(ns, ModeNode, Target{Name: "egress", NodeSelector: sel}), nil)
	site := echoSite(t)
	port := nextPort()
	reqs := make([]providers.CreateRequest, 4)
	for i := range reqs {
		reqs[i] = request("egress", port)
		reqs[i].Auth = &providers.Auth{Username: "crawler", Password: providers.Secret("pw-" + strconv.Itoa(i))}
	}
	insts, errs := make([]providers.Instance, 3), make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 { // at once: the target's lock keeps two off one node
		wg.Go(func() { insts[i], errs[i] = p.Create(t.Context(), reqs[i]) })
	}
	wg.Wait()
	used := map[string]bool{}
	for i := range 3 {
		if errs[i] != nil {
			t.Fatalf("Create %d: %v", i, errs[i])
		}
		inst := settle(t, p, insts[i].ID)
		if nodes[inst.Address] == "" || used[inst.Address] {
			t.Fatalf("proxy %d reports %s: want a node address of its own (%v)", i, inst.Address, nodes)
		}
		used[inst.Address] = true
		if seen := fetchThrough(t, inst, reqs[i].Auth, site); seen != inst.Address {
			t.Errorf("the site saw proxy %d's traffic from %s, want its node's %s", i, seen, inst.Address)
		}
	}
	_, err := p.Create(t.Context(), reqs[3])
	if !errors.Is(err, providers.ErrQuota) || !hasAll(err.Error(), "egress", "one proxy per node") {
		t.Fatalf("fourth Create = %v, want Quota saying every node runs one proxy", err)
	}
	makeNode(t, group+"-n4", "127.0.105.4", sel)
	fourth, err := p.Create(t.Context(), reqs[3])
	if err != nil {
		t.Fatalf("fourth Create once a node joined: %v", err)
	}
	if got := settle(t, p, fourth.ID); got.Address != "127.0.105.4" {
		t.Errorf("fourth proxy on %s, want the new node's 127.0.105.4", got.Address)
	}
	replaceAfterNodeLoss(t, p, reqs[0], insts[0].ID, group, sel, site)
}

// replaceAfterNodeLoss removes the node under the proxy with ID id: the proxy turns
// Terminated, and deleting and creating it again (the reconciler's answer) lands it on a
// node that joined meanwhile.
func replaceAfterNodeLoss(t *testing.T, p *Provider, req providers.CreateRequest, id, group string, sel map[string]string, site string) {
	t.Helper()
	pod, err := admin.CoreV1().Pods(p.cfg.Namespace).Get(t.Context(), req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Nodes().Delete(t.Context(), pod.Spec.NodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if inst, err := p.Get(t.Context(), id); err != nil || inst.State != providers.StateTerminated {
		t.Fatalf("after its node went: %s, %v; want Terminated", inst.State, err)
	}
	list, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, inst := range list {
		if inst.ID == id && inst.State != providers.StateTerminated {
			t.Errorf("List says %s, want Terminated", inst.State)
		}
	}
	makeNode(t, group+"-n5", "127.0.105.5", sel)
	if err := p.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	again, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("replacement Create: %v", err)
	}
	got := settle(t, p, again.ID)
	if got.Address != "127.0.105.5" {
		t.Errorf("replacement on %s, want the new node's 127.0.105.5", got.Address)
	}
	if seen := fetchThrough(t, got, req.Auth, site); seen != got.Address {
		t.Errorf("the site saw the replacement's traffic from %s, want %s", seen, got.Address)
	}
}

// echoSite is a web site on loopback that answers with the address it was reached from.
func echoSite(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		io.WriteString(w, host)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// fetchThrough fetches the site through the proxy, with its credential, and returns the
// address the site saw.
func fetchThrough(t *testing.T, inst providers.Instance, auth *providers.Auth, site string) string {
	t.Helper()
	proxy := &url.URL{Scheme: "http", Host: net.JoinHostPort(inst.Address, strconv.Itoa(inst.Port))}
	if auth != nil {
		proxy.User = url.UserPassword(auth.Username, auth.Password.Reveal())
	}
	tr := &http.Transport{Proxy: http.ProxyURL(proxy)}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	resp, err := client.Get(site)
	if err != nil {
		t.Fatalf("through %s: %v", proxy.Host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("through %s: %s %s", proxy.Host, resp.Status, body)
	}
	return strings.TrimSpace(string(body))
}

// Check in mode node: a target with a ready node is Ready, saying how many are free; a target
// whose node does not exist, or whose nodes are not ready, is NoReadyNode, saying so.
func TestCheckModeNode(t *testing.T) {
	needCluster(t)
	ns := namespace(t)
	group := uniq("check")
	sel := map[string]string{"egressd.test/group": group}
	makeNode(t, group+"-a", "127.0.109.1", sel)
	p := newProvider(t, "check", testConfig(ns, ModeNode, Target{Name: "group", NodeSelector: sel},
		Target{Node: uniq("absent")}), nil)
	st := p.Check(t.Context())
	if len(st) != 2 {
		t.Fatalf("Check = %+v, want one verdict per target", st)
	}
	if g := st[0]; !g.Ready || g.Reason != ReasonReachable || g.Details["freeNodes"] != "1" || g.Details["version"] == "" {
		t.Errorf("group target: %+v, want Ready with one free node and the server's version", g)
	}
	if a := st[1]; a.Ready || a.Reason != ReasonNoNode || !strings.Contains(a.Message, "none ready") {
		t.Errorf("absent node: %+v, want NoReadyNode", a)
	}
}
