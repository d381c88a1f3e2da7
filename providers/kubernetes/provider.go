// Package kubernetes runs egressd's forward proxies as pods, through client-go. It imports no
// NATS.
//
// In mode node each proxy is a host-network pod pinned to one node with nodeName, one proxy
// per node, and its address is the node's (ExternalIP first): every node is an egress. In
// mode pod it is a plain pod on the pod network, addressed by its pod IP (development).
//
// A proxy's pod and its Secret share the instance name. The pod carries the marks as labels
// (managed, uid, installation, provider, target) and annotations (createdAt, proxy); the
// Secret holds the proxy's credential line (providers.AuthFileLine: a salted hash of a
// password, or a lease key) and is mounted into the pod, so no credential is ever in a pod
// spec. The pod is made first and the Secret, owned by the pod, second: a Secret never
// exists without the pod it was made for, except when a Delete is cut off between the two,
// which Leftovers finds.
package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egressd/egressd/providers"
)

// Provider runs instances as pods in one namespace. It is safe for concurrent use.
type Provider struct {
	name string
	cfg  settings
	log  *slog.Logger
	cs   kubernetes.Interface
	now  func() time.Time

	names   providers.KeyedMutex // Create and Delete of one instance
	targets providers.KeyedMutex // choosing a free node of one target (mode node)

	// afterPod, when set (tests), runs between making a pod and making its Secret: the
	// kill -9 test stops the process there.
	afterPod func(*corev1.Pod)
}

var (
	_ providers.Provider       = (*Provider)(nil)
	_ providers.Cataloger      = (*Provider)(nil)
	_ providers.Checker        = (*Provider)(nil)
	_ providers.LeftoverLister = (*Provider)(nil)
)

// New builds a provider named name (a DNS label: it reaches labels) from cfg, reading the
// kubeconfig it names (or the in-cluster config). It makes no API call.
func New(name string, cfg Config, log *slog.Logger) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kubernetes provider %s: %w", name, err)
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes provider %s: %w", name, err)
	}
	return NewForConfig(name, cfg, rc, log)
}

// NewForConfig is New with the API server's client config given (tests, embedding);
// cfg.Kubeconfig and cfg.Context are ignored.
func NewForConfig(name string, cfg Config, rc *rest.Config, log *slog.Logger) (*Provider, error) {
	if !providers.ValidName(name) {
		return nil, fmt.Errorf("kubernetes provider %q: the name must be a DNS-1123 label (it reaches pod labels)", name)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kubernetes provider %s: %w", name, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rc = rest.CopyConfig(rc)
	// client-go's default (5 per second) would make a reconciler's burst of creates queue in
	// the client; the API server's own priority and fairness is the limit that matters.
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "egressd/" + name
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes provider %s: client: %w", name, err)
	}
	return &Provider{name: name, cfg: cfg.settings(), log: log.With("provider", name), cs: cs, now: time.Now}, nil
}

// restConfig reads the kubeconfig file, or the in-cluster config when none is named.
func restConfig(cfg Config) (*rest.Config, error) {
	if cfg.Kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: none set and not running in a cluster: %w", err)
		}
		return rc, nil
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}
	over := &clientcmd.ConfigOverrides{CurrentContext: cfg.Context}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, over).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return rc, nil
}

// Catalog offers the targets. It never holds credentials or the API server's address. Every
// pod runs the configured image, so it offers no image or machine type keys: placement.image
// and placement.machineType, like user-data (a pod has no cloud-init), are not used.
func (p *Provider) Catalog() providers.Catalog {
	c := providers.Catalog{Type: "kubernetes"}
	for _, t := range p.cfg.Targets {
		c.Hosts = append(c.Hosts, providers.Host{Name: t.Name, MaxConcurrentOps: t.MaxConcurrentOps})
	}
	return c
}

// Instance IDs are namespaces/<namespace>/pods/<name>; a leftover Secret's is
// namespaces/<namespace>/secrets/<name> (only Delete takes it). Neither a namespace nor a
// name (DNS labels) can hold the separator.
const (
	idNamespaces = "namespaces"
	idPods       = "pods"
	idSecrets    = "secrets"
)

func (p *Provider) podID(name string) string {
	return idNamespaces + "/" + p.cfg.Namespace + "/" + idPods + "/" + name
}

// ParseID returns the namespace, kind (pods or secrets) and name of an ID.
func ParseID(id string) (namespace, kind, name string, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 4 || parts[0] != idNamespaces || (parts[2] != idPods && parts[2] != idSecrets) ||
		!providers.ValidName(parts[1]) || !providers.ValidName(parts[3]) {
		return "", "", "", fmt.Errorf("%w %q: want namespaces/<namespace>/pods/<name>", errBadID, id)
	}
	return parts[1], parts[2], parts[3], nil
}

// parseID is ParseID, refusing another namespace: a typo must not read as a pod that is gone.
func (p *Provider) parseID(id string) (kind, name string, err error) {
	ns, kind, name, err := ParseID(id)
	if err != nil {
		return "", "", err
	}
	if ns != p.cfg.Namespace {
		return "", "", fmt.Errorf("%w %q: namespace %q is not this provider's (%s)", errBadID, id, ns, p.cfg.Namespace)
	}
	return kind, name, nil
}

// call bounds one API call by the call budget as well as ctx.
func (p *Provider) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.cfg.call)
}

// lockName serializes Create and Delete of one instance within this process. Across
// processes the provisioner's per-proxy op lock does, and the API server's unique names.
func (p *Provider) lockName(ctx context.Context, name string) (func(), error) {
	ctx, cancel := p.call(ctx)
	defer cancel()
	unlock, err := p.names.Lock(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is busy with another create or delete: %w", errBusy, name, err)
	}
	return unlock, nil
}
