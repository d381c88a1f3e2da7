package kubernetes

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	sigsyaml "sigs.k8s.io/yaml"
)

const manifests = "../../deploy/kubernetes"

// kustomization is the part of kustomize's format deploy/kubernetes uses. It is decoded
// strictly: a field this renderer does not know fails the test instead of being ignored.
type kustomization struct {
	APIVersion         string   `json:"apiVersion"`
	Kind               string   `json:"kind"`
	Namespace          string   `json:"namespace"`
	Resources          []string `json:"resources"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
	GeneratorOptions struct {
		DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
	} `json:"generatorOptions"`
}

// render builds what `kubectl apply -k deploy/kubernetes` sends, for the features the
// kustomization uses: its resources, the namespace set on every namespaced object, and the
// ConfigMaps generated from files without a hash suffix.
func render(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(manifests, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := sigsyaml.UnmarshalStrict(raw, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if !k.GeneratorOptions.DisableNameSuffixHash {
		t.Fatal("the Deployments name the ConfigMap without kustomize's hash suffix")
	}
	var out []*unstructured.Unstructured
	for _, f := range k.Resources {
		out = append(out, decodeAll(t, filepath.Join(manifests, f))...)
	}
	for _, g := range k.ConfigMapGenerator {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: g.Name}, Data: map[string]string{}}
		for _, f := range g.Files {
			b, err := os.ReadFile(filepath.Join(manifests, f))
			if err != nil {
				t.Fatal(err)
			}
			cm.Data[filepath.Base(f)] = string(b)
		}
		obj, err := toUnstructured(cm)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, obj)
	}
	for _, obj := range out {
		switch obj.GetKind() {
		case "Namespace", "ClusterRole", "ClusterRoleBinding":
		default:
			obj.SetNamespace(k.Namespace)
		}
	}
	return out
}

func decodeAll(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

func toUnstructured(v any) (*unstructured.Unstructured, error) {
	b, err := sigsyaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{}
	return obj, sigsyaml.Unmarshal(b, &obj.Object)
}

// applyAll server-side applies the objects as the admin, so a field the API does not know
// or refuses fails the test.
func applyAll(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cluster)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(admin.Discovery()))
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, obj.GetName(), err)
		}
		body, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if obj.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		force := true
		if _, err := ri.Patch(t.Context(), obj.GetName(), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "egressd-deploy", Force: &force, FieldValidation: "Strict"}); err != nil {
			t.Fatalf("server-side apply of %s %s: %v", gvk.Kind, obj.GetName(), err)
		}
	}
}

// The manifests apply cleanly to the real API server (server-side, strict field validation),
// the config they mount is a valid kubernetes block, and the Role and ClusterRole are enough
// for the whole conformance suite, in mode node, run as the provisioner's ServiceAccount.
func TestManifestsApplyAndSuffice(t *testing.T) {
	needCluster(t)
	objs := render(t)
	applyAll(t, objs)
	var cfg Config
	for _, obj := range objs {
		if obj.GetKind() == "ConfigMap" {
			data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
			cfg = providerBlock(t, []byte(data["egressd.yaml"]))
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("egressd.yaml: %v", err)
	}
	sa := rest.CopyConfig(cluster)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:egressd:egressd-provisioner"}
	p, err := NewForConfig("k8s", cfg, sa, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.Check(t.Context()) {
		if st.Reason == ReasonForbidden {
			t.Fatalf("Check as the ServiceAccount: %s", st.Message)
		}
	}
	group := uniq("sa")
	sel := map[string]string{"egressd.test/group": group}
	for i := range 12 {
		makeNode(t, uniq(group), "127.0.107."+itoa(i+1), sel)
	}
	conformanceWith(t, ModeNode, sel, suiteOptions{namespace: "egressd", rc: sa, serial: true})
}

// providerBlock decodes the kubernetes block of a config file strictly, as egressd's loader.
func providerBlock(t *testing.T, raw []byte) Config {
	t.Helper()
	var file struct {
		Providers []struct {
			Type       string    `yaml:"type"`
			Kubernetes yaml.Node `yaml:"kubernetes"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	for _, p := range file.Providers {
		if p.Type != "kubernetes" {
			continue
		}
		b, err := yaml.Marshal(&p.Kubernetes)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		var cfg Config
		if err := dec.Decode(&cfg); err != nil {
			t.Fatalf("kubernetes block: %v", err)
		}
		return cfg
	}
	t.Fatal("no kubernetes provider in the config")
	return Config{}
}

// The sample config in deploy/ is a valid kubernetes block, key for key.
func TestSampleConfig(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/kubernetes.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := providerBlock(t, raw).Validate(); err != nil {
		t.Fatal(err)
	}
}
