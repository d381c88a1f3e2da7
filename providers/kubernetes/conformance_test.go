package kubernetes

import (
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
)

// world is one subtest's namespace, kubelet and port.
type world struct {
	ns   string
	port int
	cfg  Config
}

// The conformance suite against the real kube-apiserver, in mode pod (each subtest its own
// namespace, its pods brought up by the test's kubelet with real forward proxies) and in
// mode node over a group of twelve nodes (the suite makes up to eight proxies at once on
// one host, and mode node puts each on a node of its own).
func TestConformance(t *testing.T) {
	needCluster(t)
	t.Run("ModePod", func(t *testing.T) { conformanceWith(t, ModePod, nil, suiteOptions{}) })
	t.Run("ModeNode", func(t *testing.T) {
		group := uniq("conformance")
		for i := range 12 {
			makeNode(t, uniq(group), "127.0.103."+itoa(i+1), map[string]string{"egressd.test/group": group})
		}
		conformanceWith(t, ModeNode, map[string]string{"egressd.test/group": group}, suiteOptions{})
	})
}

// suiteOptions: a namespace all subtests share (empty: one each), an identity (nil: the
// admin), and whether the subtests run one at a time.
type suiteOptions struct {
	namespace string
	rc        *rest.Config
	serial    bool
}

func conformanceWith(t *testing.T, mode string, selector map[string]string, o suiteOptions) {
	var worlds sync.Map // providers.Provider → *world
	open := func(t *testing.T, w *world) providers.Provider {
		rc := cluster
		if o.rc != nil {
			rc = o.rc
		}
		p, err := NewForConfig("conformance", w.cfg, rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		worlds.Store(providers.Provider(p), w)
		return p
	}
	worldOf := func(t *testing.T, p providers.Provider) *world {
		w, ok := worlds.Load(p)
		if !ok {
			t.Fatal("provider not built by the harness")
		}
		return w.(*world)
	}
	var byTest sync.Map // *testing.T → *world
	target := Target{Name: "group", NodeSelector: selector}
	if mode == ModePod {
		target = Target{Name: "group", NodeSelector: map[string]string{"egressd.test/any": "true"}}
	}
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providers.Provider {
			w := &world{ns: o.namespace, port: nextPort()}
			if w.ns == "" {
				w.ns = namespace(t)
			}
			w.cfg = testConfig(w.ns, mode, target)
			startKubelet(t, w.ns, mode)
			byTest.Store(t, w)
			return open(t, w)
		},
		Request: func(t *testing.T, name, uid string) providers.CreateRequest {
			w, _ := byTest.Load(t)
			return providers.CreateRequest{Name: name, UID: uid, Installation: testInstallation,
				Proxy: "conformance", Host: "group", Port: w.(*world).port}
		},
		MalformedIDs: []string{
			"namespaces/x/pods/", "namespaces/x/pods/UPPER", "namespaces//pods/egress-abc",
			"namespaces/x/pod/egress-abc", "namespace/x/pods/egress-abc", "namespaces/x/pods/a/b",
			"namespaces/not-this-one/pods/egress-abc", "zones/z/instances/egress-abc", "egress-abc",
		},
		Settle: settle,
		Serial: o.serial,
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider { return open(t, worldOf(t, p)) },
		PlantUnmarked: func(t *testing.T, p providers.Provider) string {
			w := worldOf(t, p)
			name := providers.InstanceName("someone-else", t.Name())
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "other"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "other"}}}}
			if _, err := admin.CoreV1().Pods(w.ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			return name
		},
	})
}
