package kubernetes

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/providers"
)

// Get reads the proxy's pod (and in mode node its node) and reports it:
//
//   - Pending, or Running without an address yet: Provisioning;
//   - Running with an address (mode node: the node's; mode pod: the pod IP): Running;
//   - Failed or Succeeded (an eviction is Failed), being deleted, or, in mode node, pinned to
//     a node that is gone: Terminated, so the reconciler replaces it.
func (p *Provider) Get(ctx context.Context, id string) (providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return providers.Instance{}, p.classify(opGet, id, err)
	}
	kind, name, err := p.parseID(id)
	if err == nil && kind != idPods {
		err = fmt.Errorf("%w %q: Get takes a pod's ID", errBadID, id)
	}
	if err != nil {
		return providers.Instance{}, p.classify(opGet, id, err)
	}
	pod, err := p.getPod(ctx, name)
	if apierrors.IsNotFound(err) {
		err = fmt.Errorf("%w: %s/%s", errGone, p.cfg.Namespace, name)
	}
	if err != nil {
		return providers.Instance{}, p.classify(opGet, id, err)
	}
	if pod.Labels[labelManaged] != "true" || pod.Labels[labelProvider] != p.name {
		return providers.Instance{}, p.classify(opGet, id, fmt.Errorf("%w: pod %s/%s", errNotOurs, p.cfg.Namespace, name))
	}
	inst, err := p.describeOne(ctx, pod)
	return inst, p.classify(opGet, id, err)
}

// describeOne reports one pod, reading its node in mode node.
func (p *Provider) describeOne(ctx context.Context, pod *corev1.Pod) (providers.Instance, error) {
	nodes := map[string]*corev1.Node{}
	if p.cfg.Mode == ModeNode && pod.Spec.NodeName != "" {
		cctx, cancel := p.call(ctx)
		n, err := p.cs.CoreV1().Nodes().Get(cctx, pod.Spec.NodeName, metav1.GetOptions{})
		cancel()
		switch {
		case err == nil:
			nodes[n.Name] = n
		case !apierrors.IsNotFound(err):
			return providers.Instance{}, err
		}
	}
	return p.describe(pod, nodes), nil
}

// List returns every pod with the managed mark and this provider's name, in any
// installation, with its marks. It fails rather than report a list it cannot vouch for.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, p.classify(opList, "", err)
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	pods, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(cctx, metav1.ListOptions{LabelSelector: p.ownSelector()})
	if err != nil {
		return nil, p.classify(opList, "", err)
	}
	nodes := map[string]*corev1.Node{}
	if p.cfg.Mode == ModeNode && len(pods.Items) > 0 {
		list, err := p.cs.CoreV1().Nodes().List(cctx, metav1.ListOptions{})
		if err != nil {
			return nil, p.classify(opList, "", err)
		}
		for i := range list.Items {
			nodes[list.Items[i].Name] = &list.Items[i]
		}
	}
	out := make([]providers.Instance, 0, len(pods.Items))
	for i := range pods.Items {
		out = append(out, p.describe(&pods.Items[i], nodes))
	}
	slices.SortFunc(out, func(a, b providers.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// describe turns a pod into an Instance; nodes holds the nodes that exist (mode node).
func (p *Provider) describe(pod *corev1.Pod, nodes map[string]*corev1.Node) providers.Instance {
	inst := providers.Instance{ID: p.podID(pod.Name), Name: pod.Name, Host: pod.Labels[labelTarget],
		Port: podPort(pod), Marks: marksOf(pod.ObjectMeta), State: providers.StateProvisioning}
	addr := ""
	node, nodeKnown := nodes[pod.Spec.NodeName]
	if p.cfg.Mode == ModeNode && nodeKnown {
		addr = p.nodeAddress(node)
	} else if p.cfg.Mode == ModePod {
		if ip, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			addr = ip.String()
		}
	}
	switch {
	case pod.DeletionTimestamp != nil, finished(pod):
		inst.State = providers.StateTerminated
	case p.cfg.Mode == ModeNode && pod.Spec.NodeName != "" && !nodeKnown:
		inst.State = providers.StateTerminated // the node is gone, and the pod with it
	case pod.Status.Phase == corev1.PodRunning && addr != "":
		inst.State, inst.Address = providers.StateRunning, addr
	}
	return inst
}

// podPort is the proxy's port as the pod declares it.
func podPort(pod *corev1.Pod) int {
	for _, c := range pod.Spec.Containers {
		if c.Name == containerName && len(c.Ports) > 0 {
			return int(c.Ports[0].ContainerPort)
		}
	}
	return 0
}
