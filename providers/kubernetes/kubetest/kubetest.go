// Package kubetest is what tests of the kubernetes provider share: a real kube-apiserver and
// etcd started by controller-runtime's envtest from the binaries `make kubernetes` builds
// (KUBEBUILDER_ASSETS), and Kubelet, which plays the kubelet for one namespace by running a
// real forward proxy per pod. Like net/http/httptest it is for tests only; it imports no
// provider and no NATS.
package kubetest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// EnvRequired is the variable that, set to "required" (CI), makes tests fail rather than
// skip without the control plane.
const EnvRequired = "EGRESSD_KUBERNETES"

// ControlPlane is a running kube-apiserver with its etcd.
type ControlPlane struct {
	env    *envtest.Environment
	Config *rest.Config // the admin's (system:masters)
	Admin  kubernetes.Interface
}

// Required reports whether EGRESSD_KUBERNETES=required.
func Required() bool { return os.Getenv(EnvRequired) == "required" }

// Assets returns KUBEBUILDER_ASSETS after checking it holds kube-apiserver and etcd.
func Assets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", errors.New("KUBEBUILDER_ASSETS is not set (run `make kubernetes` and set it to .cache/kubernetes/bin)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s has no %s (run `make kubernetes`): %w", dir, bin, err)
		}
	}
	return dir, nil
}

// Start starts kube-apiserver and etcd from KUBEBUILDER_ASSETS, on loopback.
func Start() (*ControlPlane, error) {
	dir, err := Assets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir,
		ControlPlaneStartTimeout: 2 * time.Minute, ControlPlaneStopTimeout: time.Minute}
	// Without controllers nothing maintains the kubernetes Service's endpoints.
	env.ControlPlane.GetAPIServer().Configure().Set("endpoint-reconciler-type", "none")
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", dir, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &ControlPlane{env: env, Config: cfg, Admin: cs}, nil
}

// Stop stops the API server and etcd and removes their data.
func (c *ControlPlane) Stop() error { return c.env.Stop() }

// Kubeconfig returns a kubeconfig file's content for a new user in the admins' group.
func (c *ControlPlane) Kubeconfig(user string) ([]byte, error) {
	u, err := c.env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	return u.KubeConfig()
}
