package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/providers"
)

// Delete removes the proxy's pod (with the configured grace period) and its Secret; a pod or
// Secret already gone is fine. An object of the name without this provider's marks is not
// touched. A leftover's ID (namespaces/N/secrets/NAME) deletes that Secret if it is still
// without its pod.
func (p *Provider) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return p.classify(opDelete, id, err)
	}
	kind, name, err := p.parseID(id)
	if err != nil {
		return p.classify(opDelete, id, err)
	}
	unlock, err := p.lockName(ctx, name)
	if err != nil {
		return p.classify(opDelete, id, err)
	}
	defer unlock()
	if kind == idSecrets {
		return p.classify(opDelete, id, p.deleteLeftover(ctx, name))
	}
	if err := p.deletePod(ctx, name); err != nil {
		return p.classify(opDelete, id, err)
	}
	return p.classify(opDelete, id, p.deleteSecret(ctx, name))
}

func (p *Provider) deletePod(ctx context.Context, name string) error {
	pods := p.cs.CoreV1().Pods(p.cfg.Namespace)
	cctx, cancel := p.call(ctx)
	defer cancel()
	pod, err := pods.Get(cctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Labels[labelManaged] != "true" || pod.Labels[labelProvider] != p.name {
		return fmt.Errorf("%w: pod %s/%s", errNotOurs, p.cfg.Namespace, name)
	}
	// The UID precondition: a pod of the same name made since is not this Delete's.
	err = pods.Delete(cctx, name, metav1.DeleteOptions{GracePeriodSeconds: &p.cfg.grace,
		Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err == nil || apierrors.IsNotFound(err) {
		p.log.Info("kubernetes pod deleted", "name", name)
		return nil
	}
	return err
}

func (p *Provider) deleteSecret(ctx context.Context, name string) error {
	secrets := p.cs.CoreV1().Secrets(p.cfg.Namespace)
	cctx, cancel := p.call(ctx)
	defer cancel()
	s, err := secrets.Get(cctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if s.Labels[labelManaged] != "true" || s.Labels[labelProvider] != p.name {
		return fmt.Errorf("%w: Secret %s/%s", errNotOurs, p.cfg.Namespace, name)
	}
	err = secrets.Delete(cctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// deleteLeftover deletes the Secret if, looked at again under the name's lock, it has no pod.
func (p *Provider) deleteLeftover(ctx context.Context, name string) error {
	_, err := p.getPod(ctx, name)
	switch {
	case err == nil:
		return nil // its pod is back (a Create): not a leftover any more
	case !apierrors.IsNotFound(err):
		return err
	}
	return p.deleteSecret(ctx, name)
}

// Leftovers lists (providers.LeftoverLister) this provider's Secrets whose pod is gone: a
// Delete cut off between the pod and the Secret, in a cluster whose garbage collector has not
// removed the Secret with its owner. Such a Secret is garbage whichever installation made
// it: Kubernetes would remove it too. The host is the Secret's target.
func (p *Provider) Leftovers(ctx context.Context) ([]providers.Leftover, error) {
	if err := ctx.Err(); err != nil {
		return nil, p.classify(opList, "", err)
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	opts := metav1.ListOptions{LabelSelector: p.ownSelector()}
	secrets, err := p.cs.CoreV1().Secrets(p.cfg.Namespace).List(cctx, opts)
	if err != nil {
		return nil, p.classify(opList, "", err)
	}
	pods, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(cctx, opts)
	if err != nil {
		return nil, p.classify(opList, "", err)
	}
	live := map[string]bool{}
	for _, pod := range pods.Items {
		live[pod.Name] = true
	}
	var out []providers.Leftover
	for _, s := range secrets.Items {
		if live[s.Name] {
			continue
		}
		out = append(out, leftoverOf(p.cfg.Namespace, &s))
	}
	slices.SortFunc(out, func(a, b providers.Leftover) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func leftoverOf(ns string, s *corev1.Secret) providers.Leftover {
	return providers.Leftover{ID: idNamespaces + "/" + ns + "/" + idSecrets + "/" + s.Name, Host: s.Labels[labelTarget],
		Name: s.Name, Parts: []string{"secret " + ns + "/" + s.Name}, ModifiedAt: s.CreationTimestamp.UTC()}
}
