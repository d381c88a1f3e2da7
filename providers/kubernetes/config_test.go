package kubernetes

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/egressd/egressd/providers"
)

// Every bad config is refused with an error naming its key, and New changes nothing.
func TestConfigErrorsNameTheField(t *testing.T) {
	ok := testConfig("egress", ModeNode, Target{Node: "node-a"})
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	neg := Duration(-1)
	half := Duration(1500e6)
	for _, c := range []struct {
		key    string
		mutate func(*Config)
	}{
		{"namespace", func(c *Config) { c.Namespace = "Not_A_Namespace" }},
		{"image", func(c *Config) { c.Image = "" }},
		{"imagePullPolicy", func(c *Config) { c.ImagePullPolicy = "Sometimes" }},
		{"imagePullSecrets[0]", func(c *Config) { c.ImagePullSecrets = []string{"Bad Name"} }},
		{"mode", func(c *Config) { c.Mode = "daemonset" }},
		{"addressTypes[0]", func(c *Config) { c.AddressTypes = []string{"PublicIP"} }},
		{"targets", func(c *Config) { c.Targets = nil }},
		{"targets[0]", func(c *Config) { c.Targets = []Target{{Name: "x"}} }},
		{"targets[0]", func(c *Config) { c.Targets = []Target{{Node: "a", NodeSelector: map[string]string{"k": "v"}}} }},
		{"targets[0].nodeSelector", func(c *Config) { c.Targets = []Target{{Name: "g", NodeSelector: map[string]string{"bad key!": "v"}}} }},
		{"targets[0].name", func(c *Config) { c.Targets = []Target{{Node: "node.with.dots"}} }},
		{"targets[1].name", func(c *Config) { c.Targets = []Target{{Node: "a"}, {Node: "a"}} }},
		{"targets[0].maxConcurrentOps", func(c *Config) { c.Targets = []Target{{Node: "a", MaxConcurrentOps: -1}} }},
		{"resources.limits.memory", func(c *Config) { c.Resources.Limits.Memory = "lots" }},
		{"runAsUser", func(c *Config) { c.RunAsUser = -5 }},
		{"reservedPorts[1]", func(c *Config) { c.ReservedPorts = []int{8080, 70000} }},
		{"tolerations[0].operator", func(c *Config) { c.Tolerations = []Toleration{{Operator: "Maybe"}} }},
		{"tolerations[0].effect", func(c *Config) { c.Tolerations = []Toleration{{Effect: "Never"}} }},
		{"terminationGracePeriod", func(c *Config) { c.TerminationGracePeriod = &neg }},
		{"terminationGracePeriod", func(c *Config) { c.TerminationGracePeriod = &half }},
		{"budgets.call", func(c *Config) { c.Budgets.Call = -1 }},
		{"kubeconfig", func(c *Config) { c.Kubeconfig = "a\nb" }},
	} {
		cfg := testConfig("egress", ModeNode, Target{Node: "node-a"})
		c.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.key+":") {
			t.Errorf("%s: Validate = %v, want an error naming it", c.key, err)
		}
		if _, err := New("k", cfg, nil); err == nil {
			t.Errorf("%s: New accepted the config", c.key)
		}
	}
	if _, err := New("Bad_Name", ok, nil); err == nil {
		t.Error("New accepted a provider name that is not a DNS label")
	}
}

// Requests that would never run are refused before any call, naming the field: a port the
// non-root proxy cannot bind, a reserved port, a target not configured, marks that are not
// label values.
func TestCreateRefusesBadRequests(t *testing.T) {
	cfg := testConfig("egress", ModeNode, Target{Node: "node-a"}, Target{Name: "eu", NodeSelector: map[string]string{"region": "eu"}})
	p, err := NewForConfig("k", cfg, &restConfigNowhere, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		want   string
		mutate func(*providers.CreateRequest)
	}{
		{"port 80: the proxy runs as a non-root user", func(r *providers.CreateRequest) { r.Port = 80 }},
		{"port 8080 is in reservedPorts", func(r *providers.CreateRequest) { r.Port = 8080 }},
		{"port must be between 1 and 65535", func(r *providers.CreateRequest) { r.Port = 0 }},
		{`host "nowhere" is not in targets`, func(r *providers.CreateRequest) { r.Host = "nowhere" }},
		{"placement.zone is required", func(r *providers.CreateRequest) { r.Host = "" }},
		{"uid", func(r *providers.CreateRequest) { r.UID = "has spaces" }},
		{"installation", func(r *providers.CreateRequest) { r.Installation = "" }},
		{"auth.username", func(r *providers.CreateRequest) { r.Auth = &providers.Auth{Username: "a:b", Password: "x"} }},
		{"auth.leaseKey", func(r *providers.CreateRequest) { r.Auth = &providers.Auth{LeaseKey: "not-a-key"} }},
	} {
		req := request("node-a", 3128)
		c.mutate(&req)
		_, err := p.Create(t.Context(), req)
		if !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Create = %v, want Permanent saying so", c.want, err)
		}
	}
}

// restConfigNowhere points at a closed port: the requests above must fail before any call.
var restConfigNowhere = rest.Config{Host: "https://127.0.0.1:1"}

// An ID is outside input (status, events, the CLI): whatever it holds, ParseID returns the
// parts it is made of, or an error, never a panic.
func FuzzParseID(f *testing.F) {
	for _, id := range []string{"namespaces/egressd/pods/egress-abc", "namespaces/egressd/secrets/egress-abc",
		"namespaces//pods/x", "namespaces/a/pods/b/c", "", "/", "zones/z/instances/i"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		ns, kind, name, err := ParseID(id)
		if err != nil {
			if !errors.Is(err, errBadID) {
				t.Fatalf("ParseID(%q): %v is not errBadID", id, err)
			}
			return
		}
		if got := idNamespaces + "/" + ns + "/" + kind + "/" + name; got != id {
			t.Fatalf("ParseID(%q) = %q %q %q, which make %q", id, ns, kind, name, got)
		}
	})
}
