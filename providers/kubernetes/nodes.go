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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// targetNodes lists the target's nodes: its one node (none if it does not exist), or those
// its selector picks.
func (p *Provider) targetNodes(ctx context.Context, t Target) ([]corev1.Node, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	nodes := p.cs.CoreV1().Nodes()
	if t.Node != "" {
		n, err := nodes.Get(cctx, t.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []corev1.Node{*n}, nil
	}
	list, err := nodes.List(cctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(t.NodeSelector).String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// nodeProxies maps each node to the live mode-node proxies pinned to it, of any provider
// and installation: a node has one egress address, which one proxy serves.
func (p *Provider) nodeProxies(ctx context.Context) (map[string][]corev1.Pod, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	sel := labels.SelectorFromSet(labels.Set{labelManaged: "true", labelMode: ModeNode}).String()
	list, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(cctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	out := map[string][]corev1.Pod{}
	for _, pod := range list.Items {
		if pod.Spec.NodeName != "" && !finished(&pod) {
			out[pod.Spec.NodeName] = append(out[pod.Spec.NodeName], pod)
		}
	}
	return out, nil
}

// pickNode returns the first (by name) ready, schedulable node of the target with an address
// and no proxy. None: errNoFreeNode (Quota), saying why, so the proxy waits for a node.
func (p *Provider) pickNode(ctx context.Context, t Target) (string, error) {
	nodes, err := p.targetNodes(ctx, t)
	if err != nil {
		return "", err
	}
	taken, err := p.nodeProxies(ctx)
	if err != nil {
		return "", err
	}
	slices.SortFunc(nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	usable, busy := 0, 0
	for _, n := range nodes {
		if !nodeReady(&n) || n.Spec.Unschedulable || p.nodeAddress(&n) == "" {
			continue
		}
		usable++
		if len(taken[n.Name]) > 0 {
			busy++
			continue
		}
		return n.Name, nil
	}
	switch {
	case len(nodes) == 0:
		return "", fmt.Errorf("%w: target %s has no node (%s)", errNoFreeNode, t.Name, describeTarget(t))
	case usable == 0:
		return "", fmt.Errorf("%w: none of the %d nodes of target %s is ready, schedulable and has an address of type %s",
			errNoFreeNode, len(nodes), t.Name, strings.Join(p.cfg.AddressTypes, " or "))
	}
	return "", fmt.Errorf("%w: every usable node of target %s (%d) already runs a proxy; mode node runs one proxy per node, since a node has one egress address",
		errNoFreeNode, t.Name, busy)
}

// keepNode settles a race between processes that picked the same node: of the live proxies
// on the node, the one created first (then by name) keeps it, and a later one removes itself.
func (p *Provider) keepNode(ctx context.Context, pod *corev1.Pod) error {
	taken, err := p.nodeProxies(ctx)
	if err != nil {
		return err
	}
	for _, other := range taken[pod.Spec.NodeName] {
		if other.UID == pod.UID || !before(&other, pod) {
			continue
		}
		cctx, cancel := p.call(ctx)
		err := p.cs.CoreV1().Pods(p.cfg.Namespace).Delete(cctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("%w: node %s went to proxy %s at the same time; the next attempt picks another node",
			errNodeRace, pod.Spec.NodeName, other.Name)
	}
	return nil
}

func before(a, b *corev1.Pod) bool {
	ta, tb := createdAtOf(a), createdAtOf(b)
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Name < b.Name
}

func describeTarget(t Target) string {
	if t.Node != "" {
		return "node " + t.Node + " does not exist"
	}
	return "no node has the labels " + labels.SelectorFromSet(t.NodeSelector).String()
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeAddress is the node's first address of the configured types, in their order, that is
// an IP (a proxy is dialled by IP).
func (p *Provider) nodeAddress(n *corev1.Node) string {
	for _, typ := range p.cfg.AddressTypes {
		for _, a := range n.Status.Addresses {
			if string(a.Type) != typ {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				return ip.String()
			}
		}
	}
	return ""
}

// finished: the pod will not run again (its proxy is Terminated).
func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
