package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/egressd/egressd/providers"
)

// Each API answer the classes are decided on, as client-go builds it.
func TestClassOfAPIErrors(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, c := range []struct {
		op   string
		err  error
		want error
	}{
		{opGet, apierrors.NewNotFound(pods, "x"), providers.ErrNotFound},
		{opCreate, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "gone"), providers.ErrPermanent},
		{opCreate, apierrors.NewAlreadyExists(pods, "x"), providers.ErrTransient},
		{opDelete, apierrors.NewConflict(pods, "x", errors.New("uid precondition")), providers.ErrTransient},
		{opCreate, apierrors.NewForbidden(pods, "x", errors.New("exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1")), providers.ErrQuota},
		{opCreate, apierrors.NewForbidden(pods, "x", errors.New(`User "u" cannot create resource "pods"`)), providers.ErrPermanent},
		{opCreate, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "x", nil), providers.ErrPermanent},
		{opCreate, apierrors.NewBadRequest("no"), providers.ErrPermanent},
		{opList, apierrors.NewTimeoutError("slow", 1), providers.ErrTransient},
		{opList, apierrors.NewServerTimeout(pods, "list", 1), providers.ErrTransient},
		{opList, apierrors.NewTooManyRequests("later", 1), providers.ErrTransient},
		{opList, apierrors.NewServiceUnavailable("down"), providers.ErrTransient},
		{opList, apierrors.NewInternalError(errors.New("etcd")), providers.ErrTransient},
		{opList, apierrors.NewUnauthorized("token expired"), providers.ErrTransient},
		{opList, context.DeadlineExceeded, providers.ErrTransient},
		{opList, errors.New("dial tcp: connection refused"), providers.ErrTransient},
		{opCreate, fmt.Errorf("%w: x", errNoFreeNode), providers.ErrQuota},
		{opGet, fmt.Errorf("%w: x", errGone), providers.ErrNotFound},
		{opCreate, fmt.Errorf("%w: x", errForeign), providers.ErrPermanent},
		{opCheck, fmt.Errorf("%w: get pods", errMissing), providers.ErrPermanent},
	} {
		p := &Provider{name: "k"}
		got := p.classify(c.op, "id", c.err)
		if providers.ClassOf(got) != c.want {
			t.Errorf("%s %v: class %v, want %v", c.op, c.err, providers.ClassOf(got), c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%v: the cause is not reachable", c.err)
		}
	}
}

// The API server's real refusals, through the provider: a full ResourceQuota is Quota, an
// identity without RBAC is Permanent (and Check says Forbidden), a field the API refuses is
// Permanent, and a namespace that does not exist is Permanent.
func TestAPIRefusalsAreClassified(t *testing.T) {
	needCluster(t)
	ns := namespace(t)
	target := Target{Name: "group", NodeSelector: map[string]string{"egressd.test/any": "true"}}
	fullQuota(t, ns)
	p := newProvider(t, "refused", testConfig(ns, ModePod, target), nil)
	_, err := p.Create(t.Context(), request("group", nextPort()))
	if !errors.Is(err, providers.ErrQuota) || !strings.Contains(err.Error(), "exceeded quota") {
		t.Errorf("Create over a full quota = %v, want Quota", err)
	}

	other := namespace(t)
	nobody := rest.CopyConfig(cluster)
	nobody.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	np, err := NewForConfig("refused", testConfig(other, ModePod, target), nobody, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := np.Create(t.Context(), request("group", nextPort())); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Create without RBAC = %v, want Permanent", err)
	}
	if st := np.Check(t.Context()); st[0].Ready || st[0].Reason != ReasonForbidden || !strings.Contains(st[0].Message, "create pods") {
		t.Errorf("Check without RBAC = %+v, want Forbidden naming create pods", st[0])
	}
	if st := p.Check(t.Context()); !st[0].Ready || st[0].Reason != ReasonReachable || st[0].Details["version"] == "" {
		t.Errorf("Check as admin = %+v, want Reachable with the version", st[0])
	}

	cfg := testConfig(other, ModePod, target)
	cfg.Tolerations = []Toleration{{Key: "k", Operator: "Exists", Effect: "NoSchedule", TolerationSeconds: new(int64)}}
	ip := newProvider(t, "invalid", cfg, nil)
	if _, err := ip.Create(t.Context(), request("group", nextPort())); !errors.Is(err, providers.ErrPermanent) || !apierrors.IsInvalid(err) {
		t.Errorf("Create with a toleration the API refuses = %v, want Permanent (Invalid)", err)
	}
	gone := newProvider(t, "nowhere", testConfig("no-such-namespace", ModePod, target), nil)
	if _, err := gone.Create(t.Context(), request("group", nextPort())); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Create in a missing namespace = %v, want Permanent", err)
	}
}

// fullQuota puts a quota of no pods in ns, with the status the quota controller would write
// (there is none here).
func fullQuota(t *testing.T, ns string) {
	t.Helper()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "full"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}}
	q, err := admin.CoreV1().ResourceQuotas(ns).Create(t.Context(), q, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}
	if _, err := admin.CoreV1().ResourceQuotas(ns).UpdateStatus(t.Context(), q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The pods meet Pod Security's restricted level in mode pod (non-root, no capability, no
// privilege escalation, RuntimeDefault seccomp), as the API server's own admission judges;
// mode node's host network is refused there, Permanent, with the admission's reason.
func TestPodSecurityRestricted(t *testing.T) {
	needCluster(t)
	ns := uniq("restricted")
	_, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target := Target{Name: "group", NodeSelector: map[string]string{"egressd.test/any": "true"}}
	pod := newProvider(t, "restricted", testConfig(ns, ModePod, target), nil)
	if _, err := pod.Create(t.Context(), request("group", nextPort())); err != nil {
		t.Errorf("mode pod under restricted: %v", err)
	}
	group := uniq("psa")
	sel := map[string]string{"egressd.test/group": group}
	makeNode(t, group+"-a", "127.0.109.2", sel)
	node := newProvider(t, "restricted", testConfig(ns, ModeNode, Target{Name: "group", NodeSelector: sel}), nil)
	_, err = node.Create(t.Context(), request("group", nextPort()))
	if !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("mode node under restricted = %v, want Permanent naming PodSecurity", err)
	}
}
