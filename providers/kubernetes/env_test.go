package kubernetes

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/egressd/egressd/providers"
)

// The tests run against a real kube-apiserver and etcd (make kubernetes builds them into
// .cache/kubernetes/bin), started once for the package by envtest. Without them the tests
// that need the API server skip, unless EGRESSD_KUBERNETES=required (CI) makes them fail.
var (
	cluster    *rest.Config // the admin's (system:masters), nil when not started
	clusterEnv *envtest.Environment
	clusterErr error
	admin      kubernetes.Interface
)

const testInstallation = "inst-test"

func TestMain(m *testing.M) {
	clusterErr = startCluster()
	code := m.Run()
	if clusterEnv != nil {
		if err := clusterEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func startCluster() error {
	if os.Getenv(helperEnv) != "" {
		return nil // the kill -9 test's child process talks to its parent's cluster
	}
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set (run `make kubernetes` and set it to .cache/kubernetes/bin)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return fmt.Errorf("KUBEBUILDER_ASSETS=%s has no %s (run `make kubernetes`): %w", dir, bin, err)
		}
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir,
		ControlPlaneStartTimeout: 2 * time.Minute, ControlPlaneStopTimeout: time.Minute}
	// Without controllers nothing maintains the kubernetes Service's endpoints.
	env.ControlPlane.GetAPIServer().Configure().Set("endpoint-reconciler-type", "none")
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting kube-apiserver and etcd from %s: %w", dir, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = env.Stop()
		return err
	}
	clusterEnv, cluster, admin = env, cfg, cs
	return nil
}

// needCluster skips (or, with EGRESSD_KUBERNETES=required, fails) a test without the
// control plane.
func needCluster(t *testing.T) {
	t.Helper()
	if clusterErr == nil && cluster != nil {
		return
	}
	if os.Getenv("EGRESSD_KUBERNETES") == "required" {
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

// envtestUser is a user of the admins' group, for a kubeconfig file of its own.
func envtestUser(name string) envtest.User {
	return envtest.User{Name: name, Groups: []string{"system:masters"}}
}
