package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/kubernetes/kubetest"
	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// The tests run against a real kube-apiserver and etcd (make kubernetes builds them into
// .cache/kubernetes/bin), started once for the package by envtest. Without them the tests
// that need the API server skip, unless EGRESSD_KUBERNETES=required (CI) makes them fail.
var (
	plane      *kubetest.ControlPlane
	cluster    *rest.Config // the admin's (system:masters), nil when not started
	clusterErr error
	admin      kubernetes.Interface
)

const testInstallation = "inst-test"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "" { // the kill -9 test's child talks to its parent's cluster
		plane, clusterErr = kubetest.Start()
		if clusterErr == nil {
			cluster, admin = plane.Config, plane.Admin
		}
	}
	code := m.Run()
	if plane != nil {
		if err := plane.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needCluster skips (or, with EGRESSD_KUBERNETES=required, fails) a test without the
// control plane.
func needCluster(t *testing.T) {
	t.Helper()
	if clusterErr == nil && cluster != nil {
		return
	}
	if kubetest.Required() {
		t.Fatalf("EGRESSD_KUBERNETES=required, but the control plane is not there: %v", clusterErr)
	}
	t.Skipf("no kube-apiserver to test against: %v (EGRESSD_KUBERNETES=required makes this fail)", clusterErr)
}

var seq atomic.Int64

// uniq is a name no other test of this run uses.
func uniq(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

// namespace makes a namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := uniq("egressd-test")
	_, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("namespace %s: %v", ns, err)
	}
	return ns
}

// testConfig is a valid config for namespace ns with the targets given.
func testConfig(ns, mode string, targets ...Target) Config {
	zero := Duration(0)
	return Config{Namespace: ns, Image: "egressd:test", Mode: mode, Targets: targets,
		Resources:        Resources{Requests: ResourceList{CPU: "10m", Memory: "16Mi"}, Limits: ResourceList{Memory: "64Mi"}},
		Tolerations:      []Toleration{{Key: "egressd.io/egress", Operator: "Exists", Effect: "NoSchedule"}},
		ImagePullSecrets: []string{"regcred"}, ReservedPorts: []int{8080, 8888},
		TerminationGracePeriod: &zero}
}

// newProvider builds a provider as the admin, logging into a buffer the test can search.
func newProvider(t *testing.T, name string, cfg Config, log *slog.Logger) *Provider {
	t.Helper()
	p, err := NewForConfig(name, cfg, cluster, log)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// request is a valid request for a fresh proxy on host.
func request(host string, port int) providers.CreateRequest {
	uid := uniq("uid")
	return providers.CreateRequest{Name: providers.InstanceName(testInstallation, uid), UID: uid, Installation: testInstallation,
		Proxy: "proxy-" + uid, Host: host, Port: port}
}

// settle waits for the instance to be Running and returns it.
func settle(t *testing.T, p providers.Provider, id string) providers.Instance {
	t.Helper()
	var last providers.Instance
	var lastErr error
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		last, lastErr = p.Get(t.Context(), id)
		if lastErr == nil && last.State == providers.StateRunning {
			return last
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s not Running within a minute: last %s %v", id, last.State, lastErr)
	return last
}

// waitFor polls cond until it holds, failing the test after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// startKubelet runs the test's kubelet for ns until the test ends; what went wrong in it
// fails the test.
func startKubelet(t *testing.T, ns, mode string) *kubetest.Kubelet {
	t.Helper()
	k := kubetest.StartKubelet(admin, ns, mode, t.TempDir(), serveProxy)
	t.Cleanup(func() {
		if err := k.Stop(); err != nil {
			t.Errorf("kubelet: %v", err)
		}
	})
	return k
}

// serveProxy is egressd's own forward proxy, the one the image runs.
func serveProxy(ctx context.Context, ln net.Listener, authFile, source string) error {
	return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String(), Source: source, AuthFile: authFile})
}

// makeNode registers a ready node with ExternalIP ip, removed when the test ends.
func makeNode(t *testing.T, name, ip string, labels map[string]string) {
	t.Helper()
	if err := kubetest.MakeNode(t.Context(), admin, name, ip, labels); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

var nextPort = func() func() int {
	var mu sync.Mutex
	port := 23000
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		port++
		return port
	}
}()

func itoa(i int) string { return strconv.Itoa(i) }
