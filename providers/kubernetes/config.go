package kubernetes

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egressd/egressd/providers"
)

// Config configures a kubernetes provider. Its JSON and YAML names are the keys of the
// `kubernetes:` block of egressd's config (decoded strictly); errors from Validate name the
// key as the YAML spells it, e.g. `targets[1].nodeSelector`.
type Config struct {
	// Kubeconfig is a kubeconfig file. Empty: the in-cluster config (the pod's service
	// account), for egressd running on the cluster it manages.
	Kubeconfig string `json:"kubeconfig,omitempty" yaml:"kubeconfig,omitempty"`
	// Context picks a context of Kubeconfig. Default: its current context.
	Context string `json:"context,omitempty" yaml:"context,omitempty"`
	// Namespace holds the proxies' pods and Secrets. Required.
	Namespace string `json:"namespace" yaml:"namespace"`
	// Image is the egressd image the pods run (`egressd forward-proxy`). Required.
	Image string `json:"image" yaml:"image"`
	// ImagePullPolicy is Always, IfNotPresent or Never. Default: Kubernetes' own.
	ImagePullPolicy string `json:"imagePullPolicy,omitempty" yaml:"imagePullPolicy,omitempty"`
	// ImagePullSecrets name Secrets in Namespace that pull Image.
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty" yaml:"imagePullSecrets,omitempty"`
	// Mode is "node" (default: host network, one proxy per node, pinned with nodeName; its
	// address is the node's) or "pod" (pod network, the pod IP: for development, since pods
	// usually leave through one NAT address).
	Mode string `json:"mode,omitempty" yaml:"mode,omitempty"`
	// AddressTypes are the node address types tried in order for a proxy's address in mode
	// node. Default ExternalIP, then InternalIP.
	AddressTypes []string `json:"addressTypes,omitempty" yaml:"addressTypes,omitempty"`
	// Targets are the hosts of the catalog: placement.zone names one.
	Targets []Target `json:"targets" yaml:"targets"`
	// Resources are the proxy container's requests and limits.
	Resources Resources `json:"resources,omitempty" yaml:"resources,omitempty"`
	// RunAsUser is the proxy's non-root user ID. Default (and for 0) 65532: root is never asked
	// for, and the pod sets runAsNonRoot.
	RunAsUser int64 `json:"runAsUser,omitempty" yaml:"runAsUser,omitempty"`
	// ReservedPorts are ports the cluster keeps for itself (GKE: 8080, 8888 and others);
	// a proxy asking for one is refused instead of never starting.
	ReservedPorts []int `json:"reservedPorts,omitempty" yaml:"reservedPorts,omitempty"`
	// Tolerations let the pods run on tainted nodes (dedicated egress nodes).
	Tolerations []Toleration `json:"tolerations,omitempty" yaml:"tolerations,omitempty"`
	// TerminationGracePeriod is how long a deleted proxy may finish its connections.
	// Default 5s; 0s deletes at once.
	TerminationGracePeriod *Duration `json:"terminationGracePeriod,omitempty" yaml:"terminationGracePeriod,omitempty"`
	// Budgets bound each kind of call; zero fields take their defaults.
	Budgets Budgets `json:"budgets,omitempty" yaml:"budgets,omitempty"`
}

// Target is one host of the catalog: one node, or a group of nodes picked by labels.
type Target struct {
	// Name is the host name placement.zone uses. Default: Node.
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// Node pins the target to one node. Exactly one of Node and NodeSelector is set.
	Node string `json:"node,omitempty" yaml:"node,omitempty"`
	// NodeSelector picks the target's nodes by their labels.
	NodeSelector map[string]string `json:"nodeSelector,omitempty" yaml:"nodeSelector,omitempty"`
	// MaxConcurrentOps is how many ops may run on this target at once. Default 4.
	MaxConcurrentOps int `json:"maxConcurrentOps,omitempty" yaml:"maxConcurrentOps,omitempty"`
}

// Resources are quantities as Kubernetes writes them ("50m", "64Mi"); empty is unset.
type Resources struct {
	Requests ResourceList `json:"requests,omitempty" yaml:"requests,omitempty"`
	Limits   ResourceList `json:"limits,omitempty" yaml:"limits,omitempty"`
}

// ResourceList is CPU and memory.
type ResourceList struct {
	CPU    string `json:"cpu,omitempty" yaml:"cpu,omitempty"`
	Memory string `json:"memory,omitempty" yaml:"memory,omitempty"`
}

// Toleration is a pod toleration, as Kubernetes spells it.
type Toleration struct {
	Key               string `json:"key,omitempty" yaml:"key,omitempty"`
	Operator          string `json:"operator,omitempty" yaml:"operator,omitempty"` // Exists or Equal
	Value             string `json:"value,omitempty" yaml:"value,omitempty"`
	Effect            string `json:"effect,omitempty" yaml:"effect,omitempty"` // NoSchedule, PreferNoSchedule, NoExecute
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty" yaml:"tolerationSeconds,omitempty"`
}

// Budgets bound each kind of API call; a call also ends with its caller's context.
type Budgets struct {
	// Call bounds one API call. Default 30s.
	Call Duration `json:"call,omitempty" yaml:"call,omitempty"`
}

// Duration is providers.Duration: a Go duration string ("30s") in JSON and YAML.
type Duration = providers.Duration

// Modes, defaults and bounds.
const (
	ModeNode = "node"
	ModePod  = "pod"

	DefaultMaxConcurrentOps = 4
	DefaultRunAsUser        = 65532
	defaultCall             = 30 * time.Second
	defaultGrace            = 5 * time.Second
	// minPort: the proxy runs as non-root without capabilities, so it cannot bind below it.
	minPort = 1024
)

var (
	addressTypes = []string{"ExternalIP", "InternalIP", "Hostname", "ExternalDNS", "InternalDNS"}
	pullPolicies = []string{"", "Always", "IfNotPresent", "Never"}
	operators    = []string{"", "Exists", "Equal"}
	effects      = []string{"", "NoSchedule", "PreferNoSchedule", "NoExecute"}
)

// Validate checks the config. Every problem is reported, each naming its key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if strings.ContainsAny(c.Kubeconfig, "\x00\r\n") {
		bad("kubeconfig", "is not a file path")
	}
	if strings.ContainsAny(c.Context, "\x00\r\n") {
		bad("context", "is not a context name")
	}
	if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		bad("namespace", "%q is not a namespace name: %s", c.Namespace, strings.Join(msgs, "; "))
	}
	if c.Image == "" || strings.ContainsAny(c.Image, " \t\r\n\x00") {
		bad("image", "%q is not an image reference", c.Image)
	}
	if !slices.Contains(pullPolicies, c.ImagePullPolicy) {
		bad("imagePullPolicy", "%q is not Always, IfNotPresent or Never", c.ImagePullPolicy)
	}
	for i, s := range c.ImagePullSecrets {
		if msgs := validation.IsDNS1123Subdomain(s); len(msgs) > 0 {
			bad(fmt.Sprintf("imagePullSecrets[%d]", i), "%q is not a Secret name", s)
		}
	}
	if c.Mode != "" && c.Mode != ModeNode && c.Mode != ModePod {
		bad("mode", "%q is not node or pod", c.Mode)
	}
	for i, t := range c.AddressTypes {
		if !slices.Contains(addressTypes, t) {
			bad(fmt.Sprintf("addressTypes[%d]", i), "%q is not one of %s", t, strings.Join(addressTypes, ", "))
		}
	}
	errs = append(errs, c.validateTargets()...)
	errs = append(errs, c.Resources.validate()...)
	if c.RunAsUser < 0 {
		bad("runAsUser", "must not be negative, got %d", c.RunAsUser)
	}
	for i, p := range c.ReservedPorts {
		if p < 1 || p > 65535 {
			bad(fmt.Sprintf("reservedPorts[%d]", i), "%d is not a port", p)
		}
	}
	for i, tol := range c.Tolerations {
		errs = append(errs, tol.validate(fmt.Sprintf("tolerations[%d]", i))...)
	}
	if g := c.TerminationGracePeriod; g != nil && (*g < 0 || time.Duration(*g)%time.Second != 0) {
		bad("terminationGracePeriod", "must be whole seconds, not negative, got %s", time.Duration(*g))
	}
	if c.Budgets.Call < 0 {
		bad("budgets.call", "must not be negative, got %s", time.Duration(c.Budgets.Call))
	}
	return errors.Join(errs...)
}

func (c Config) validateTargets() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if len(c.Targets) == 0 {
		bad("targets", "at least one target (a node, or a nodeSelector group) is required")
	}
	seen := map[string]bool{}
	for i, t := range c.Targets {
		at := fmt.Sprintf("targets[%d]", i)
		switch {
		case t.Node != "" && len(t.NodeSelector) > 0:
			bad(at, "set node or nodeSelector, not both")
		case t.Node == "" && len(t.NodeSelector) == 0:
			bad(at, "set node (one node) or nodeSelector (a group of nodes)")
		case t.Node != "" && len(validation.IsDNS1123Subdomain(t.Node)) > 0:
			bad(at+".node", "%q is not a node name", t.Node)
		}
		for _, k := range slices.Sorted(maps.Keys(t.NodeSelector)) {
			if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
				bad(at+".nodeSelector", "key %q is not a label key: %s", k, strings.Join(msgs, "; "))
			}
			if msgs := validation.IsValidLabelValue(t.NodeSelector[k]); len(msgs) > 0 {
				bad(at+".nodeSelector."+k, "%q is not a label value", t.NodeSelector[k])
			}
		}
		name := t.hostName()
		switch {
		case !providers.ValidName(name):
			bad(at+".name", "%q is not a DNS-1123 label (it is a host name and a label value); set name", name)
		case seen[name]:
			bad(at+".name", "duplicate target %q", name)
		}
		seen[name] = true
		if t.MaxConcurrentOps < 0 {
			bad(at+".maxConcurrentOps", "must not be negative, got %d", t.MaxConcurrentOps)
		}
	}
	return errs
}

func (r Resources) validate() []error {
	var errs []error
	for _, q := range []struct{ key, v string }{
		{"resources.requests.cpu", r.Requests.CPU}, {"resources.requests.memory", r.Requests.Memory},
		{"resources.limits.cpu", r.Limits.CPU}, {"resources.limits.memory", r.Limits.Memory},
	} {
		if q.v == "" {
			continue
		}
		if v, err := resource.ParseQuantity(q.v); err != nil || v.Sign() < 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a quantity like 50m or 64Mi", q.key, q.v))
		}
	}
	return errs
}

func (t Toleration) validate(at string) []error {
	var errs []error
	if !slices.Contains(operators, t.Operator) {
		errs = append(errs, fmt.Errorf("%s.operator: %q is not Exists or Equal", at, t.Operator))
	}
	if !slices.Contains(effects, t.Effect) {
		errs = append(errs, fmt.Errorf("%s.effect: %q is not NoSchedule, PreferNoSchedule or NoExecute", at, t.Effect))
	}
	if t.Key != "" && len(validation.IsQualifiedName(t.Key)) > 0 {
		errs = append(errs, fmt.Errorf("%s.key: %q is not a label key", at, t.Key))
	}
	if t.Operator == "Exists" && t.Value != "" {
		errs = append(errs, fmt.Errorf("%s.value: must be empty with operator Exists", at))
	}
	return errs
}

// hostName is the target's catalog name.
func (t Target) hostName() string {
	if t.Name != "" {
		return t.Name
	}
	return t.Node
}

// settings is the config with every default applied, as the provider uses it.
type settings struct {
	Config
	call  time.Duration
	grace int64 // seconds
}

func (c Config) settings() settings {
	s := settings{Config: c, call: defaultCall, grace: int64(defaultGrace / time.Second)}
	s.Targets = slices.Clone(c.Targets)
	for i := range s.Targets {
		s.Targets[i].Name = s.Targets[i].hostName()
		if s.Targets[i].MaxConcurrentOps == 0 {
			s.Targets[i].MaxConcurrentOps = DefaultMaxConcurrentOps
		}
	}
	if s.Mode == "" {
		s.Mode = ModeNode
	}
	if len(s.AddressTypes) == 0 {
		s.AddressTypes = []string{"ExternalIP", "InternalIP"}
	}
	if s.RunAsUser == 0 {
		s.RunAsUser = DefaultRunAsUser
	}
	if c.Budgets.Call > 0 {
		s.call = time.Duration(c.Budgets.Call)
	}
	if c.TerminationGracePeriod != nil {
		s.grace = int64(time.Duration(*c.TerminationGracePeriod) / time.Second)
	}
	return s
}

// target returns the target named host.
func (s settings) target(host string) (Target, bool) {
	for _, t := range s.Targets {
		if t.Name == host {
			return t, true
		}
	}
	return Target{}, false
}

func (s settings) targetNames() []string {
	out := make([]string, 0, len(s.Targets))
	for _, t := range s.Targets {
		out = append(out, t.Name)
	}
	return out
}
