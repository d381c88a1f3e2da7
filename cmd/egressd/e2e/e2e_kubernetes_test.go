package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers/kubernetes/kubetest"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/egressd/egressd/readside/fleet"
)

// The kubernetes end-to-end test: the real `egressd run` with a kubernetes provider in mode
// node, against a real kube-apiserver and etcd (make kubernetes; KUBEBUILDER_ASSETS), with a
// kubeconfig file. Two nodes, 127.0.108.1 and .2 as their ExternalIPs; the test's kubelet
// runs egressd's own forward proxy for each pod on its node's address, with the pod's Secret
// as its auth file.
const (
	k8sNamespace = "egressd-e2e"
	k8sUser      = "crawler"
	k8sPass      = "SENTINEL-k8s-e2e-p4ss"
)

func kubernetesWorld(t *testing.T, dir string) (cfg string, admin *kubetest.ControlPlane) {
	t.Helper()
	cp, err := kubetest.Start()
	if err != nil {
		if kubetest.Required() {
			t.Fatalf("%s=required, but: %v", kubetest.EnvRequired, err)
		}
		t.Skipf("no kube-apiserver to test against: %v (%s=required makes this fail)", err, kubetest.EnvRequired)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	ctx := t.Context()
	if _, err := cp.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k8sNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if err := kubetest.MakeNode(ctx, cp.Admin, fmt.Sprintf("egress-%d", i), fmt.Sprintf("127.0.108.%d", i), map[string]string{"egressd.test/e2e": "true"}); err != nil {
			t.Fatal(err)
		}
	}
	serve := func(ctx context.Context, ln net.Listener, authFile, source string) error {
		return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String(), Source: source, AuthFile: authFile})
	}
	k := kubetest.StartKubelet(cp.Admin, k8sNamespace, kubetest.ModeNode, t.TempDir(), serve)
	t.Cleanup(func() {
		if err := k.Stop(); err != nil {
			t.Errorf("kubelet: %v", err)
		}
	})
	kc, err := cp.Kubeconfig("egressd")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = filepath.Join(dir, "egressd.yaml")
	writeFile(t, cfg, fmt.Sprintf(`providers:
  - name: k8s
    type: kubernetes
    kubernetes:
      kubeconfig: %s
      namespace: %s
      image: egressd:e2e
      mode: node
      targets:
        - name: egress
          nodeSelector: {egressd.test/e2e: "true"}
      terminationGracePeriod: 0s
`, kubeconfig, k8sNamespace))
	return cfg, cp
}

func k8sSpec(port int) string {
	return fmt.Sprintf(`{"provider":"k8s","placement":{"zone":"egress"},"port":%d,"attributes":{"e2e":"k8s"},`+
		`"auth":{"username":%q,"password":%q},`+
		`"healthCheck":{"intervalSeconds":2,"timeoutSeconds":2,"failureThreshold":2,"successThreshold":1}}`, port, k8sUser, k8sPass)
}

// TestKubernetesEndToEnd: kv put → a pod on each node → Running at the node's address →
// probed through it → Ready → leased → curl -x reaches a site that sees the node's address; a
// third proxy on the two nodes waits (Quota, one proxy per node);
// kv del removes the pods and their Secrets; the password is in no log, status, event or pod.
func TestKubernetesEndToEnd(t *testing.T) {
	needNats(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is required (.ci/run installs it)")
	}
	dir := t.TempDir()
	cfg, cp := kubernetesWorld(t, dir)
	requireProvider(t, cfg, "kubernetes")
	n := startNode(t, dir, "--config", cfg)
	webURL := serveOn(t, "127.0.0.1:0", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		peer, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(rw, "hello, %s", peer)
	})) + "/"

	n.nats("kv", "put", "proxies", "k1", k8sSpec(3128))
	n.nats("kv", "put", "proxies", "k2", k8sSpec(3128))
	rows := n.waitRows("k1 and k2 Ready", 90*time.Second, func(rows map[string]fleet.Row) bool {
		return readyOrFail(t, "k1", nil)(rows) && readyOrFail(t, "k2", nil)(rows)
	})
	if a, b := rows["k1"].Address, rows["k2"].Address; a == b || !strings.HasPrefix(a, "127.0.108.") || !strings.HasPrefix(b, "127.0.108.") {
		t.Fatalf("k1 at %s, k2 at %s: want one node address each", a, b)
	}
	// A third proxy on two nodes waits, saying why, instead of landing twice on a node.
	n.nats("kv", "put", "proxies", "k3", k8sSpec(3128))
	rows = n.waitRows("k3 Waiting", 60*time.Second, func(rows map[string]fleet.Row) bool {
		failFast(t, rows, "k3")
		return rows["k3"].Phase == events.PhaseWaiting
	})
	if r := rows["k3"]; r.Reason != events.ReasonQuota || !strings.Contains(r.Message, "one proxy per node") {
		t.Fatalf("k3: %s %q, want Quota saying one proxy per node", r.Reason, r.Message)
	}
	r, raw := n.acquire(`{"selector":{"e2e":"k8s"},"ttlSeconds":60,"holder":"e2e-k8s"}`)
	if r.Lease.ID == "" {
		t.Fatalf("acquire: %s", raw)
	}
	leased, err := url.Parse(r.Lease.URL)
	if err != nil {
		t.Fatal(err)
	}
	nodeIP, _, _ := net.SplitHostPort(leased.Host)
	for _, connect := range []bool{false, true} {
		if body := curlBody(t, r.Lease.URL, webURL, connect); body != "hello, "+nodeIP {
			t.Fatalf("curl -x %s (CONNECT %v): %q, want the site to see the node %s", leased.Host, connect, body, nodeIP)
		}
	}
	pods, err := cp.Admin.CoreV1().Pods(k8sNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("%d pods (%v), want 2", len(pods.Items), err)
	}
	podJSON, _ := json.Marshal(pods)

	n.nats("kv", "del", "-f", "proxies", "k1")
	n.nats("kv", "del", "-f", "proxies", "k2")
	// k3 is not deleted: a proxy that was sent a create waits out its Quota back-off before
	// its teardown (the reconciler's rule), although this create made nothing.
	n.waitRows("k1 and k2 gone", 60*time.Second, func(rows map[string]fleet.Row) bool {
		_, k1 := rows["k1"]
		_, k2 := rows["k2"]
		return !k1 && !k2
	})
	waitUntil(t, "no pod and no Secret left", 30*time.Second, func() (bool, string) {
		p, err1 := cp.Admin.CoreV1().Pods(k8sNamespace).List(t.Context(), metav1.ListOptions{})
		s, err2 := cp.Admin.CoreV1().Secrets(k8sNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "egressd.io/managed=true"})
		if err1 != nil || err2 != nil {
			return false, fmt.Sprint(err1, err2)
		}
		return len(p.Items) == 0 && len(s.Items) == 0, fmt.Sprintf("%d pods, %d secrets", len(p.Items), len(s.Items))
	})
	seen := string(podJSON) + n.egressd("status", "-o", "json") + n.egressd("events", "-f=false", "--since", "1h", "--json")
	if code := n.stop(); code != 0 {
		t.Fatalf("egressd exited %d after SIGTERM, want 0", code)
	}
	if seen += n.logs(); strings.Contains(seen, k8sPass) {
		t.Error("the proxies' password leaked into a pod, egressd's log, status or events")
	}
}
