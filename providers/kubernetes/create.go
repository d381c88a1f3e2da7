package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers"
)

// plan is a request checked and resolved against the config, before any call.
type plan struct {
	req    providers.CreateRequest
	id     string
	target Target
}

// Create makes sure the pod named req.Name exists on the chosen target and returns it,
// usually Provisioning (the kubelet starts it; Get follows):
//
//  1. the request is checked (Permanent, naming the field), including a port the proxy
//     cannot bind as non-root or that the cluster reserves;
//  2. a pod of that name is adopted if its marks are this request's, and refused otherwise;
//  3. in mode node a free node of the target is picked (none free: Quota, so the proxy waits
//     with that reason) and the pod is pinned to it; a pod that finds it lost the node to
//     an earlier one (another provisioner's) removes itself;
//  4. the Secret with the credential is made, owned by the pod, or put right.
//
// A Create cut off after the pod, before the Secret, leaves a pod waiting for its Secret
// volume: the next Create, or Delete, finishes the job.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	pl, err := p.plan(req)
	if err != nil {
		return providers.Instance{}, p.classify(opCreate, req.Name, err)
	}
	inst, err := p.create(ctx, pl)
	return inst, p.classify(opCreate, pl.id, err)
}

func (p *Provider) plan(req providers.CreateRequest) (plan, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...)))
	}
	if !providers.ValidName(req.Name) {
		bad("name %q is not a DNS-1123 label", req.Name)
	}
	for _, f := range []struct{ key, v string }{{"uid", req.UID}, {"installation", req.Installation}} {
		if f.v == "" || len(validation.IsValidLabelValue(f.v)) > 0 {
			bad("%s %q must be 1 to 63 letters, digits, '-', '_' or '.' (it is a label value)", f.key, f.v)
		}
	}
	errs = append(errs, p.checkPort(req.Port)...)
	if req.Auth.Lease() {
		if _, err := leaseauth.ParseKeyLines(req.Auth.LeaseKey.Reveal()); err != nil {
			bad("auth.leaseKey: %v", err)
		}
	}
	if req.Auth != nil && !req.Auth.Lease() && (req.Auth.Username == "" || strings.ContainsAny(req.Auth.Username, ":\r\n")) {
		bad("auth.username must be non-empty and hold no ':' or line break")
	}
	host, field := req.Host, "host"
	if host == "" {
		host, field = req.Placement.Zone, "placement.zone"
	}
	zone := req.Placement.Zone
	switch {
	case host == "" && len(p.cfg.Targets) == 1:
		host = p.cfg.Targets[0].Name
	case host == "":
		bad("placement.zone is required when targets lists more than one target (%s)", strings.Join(p.cfg.targetNames(), ", "))
	case zone != "" && zone != host:
		bad("placement.zone %q differs from the target %q chosen for it", zone, host)
	}
	target, ok := p.cfg.target(host)
	if host != "" && !ok {
		errs = append(errs, fmt.Errorf("%w: %s %q is not in targets (%s)", errUnknownTarget, field, host, strings.Join(p.cfg.targetNames(), ", ")))
	}
	if len(errs) > 0 {
		return plan{}, errors.Join(errs...)
	}
	return plan{req: req, id: p.podID(req.Name), target: target}, nil
}

// checkPort refuses what would never start: a port the non-root proxy cannot bind, or one
// the cluster keeps for itself (in mode node the pod takes it on the node).
func (p *Provider) checkPort(port int) []error {
	switch {
	case port < 1 || port > 65535:
		return []error{fmt.Errorf("%w: port must be between 1 and 65535, got %d", errBadRequest, port)}
	case port < minPort:
		return []error{fmt.Errorf("%w: port %d: the proxy runs as a non-root user without capabilities and cannot bind below %d; choose a port of %d or more in the proxy's spec",
			errBadRequest, port, minPort, minPort)}
	case slices.Contains(p.cfg.ReservedPorts, port):
		return []error{fmt.Errorf("%w: port %d is in reservedPorts of kubernetes provider %s (the cluster keeps it; GKE reserves 8080 and 8888 among others); choose another port in the proxy's spec",
			errBadRequest, port, p.name)}
	}
	return nil
}

func (p *Provider) create(ctx context.Context, pl plan) (providers.Instance, error) {
	if err := ctx.Err(); err != nil {
		return providers.Instance{}, err
	}
	unlock, err := p.lockName(ctx, pl.req.Name)
	if err != nil {
		return providers.Instance{}, err
	}
	defer unlock()
	pod, err := p.getPod(ctx, pl.req.Name)
	switch {
	case apierrors.IsNotFound(err):
		pod, err = p.createPod(ctx, pl)
	case err == nil:
		err = p.adopt(pod, pl)
	}
	if err != nil {
		return providers.Instance{}, err
	}
	if err := p.ensureSecret(ctx, pl, pod); err != nil {
		return providers.Instance{}, err
	}
	return p.describeOne(ctx, pod)
}

// adopt accepts an existing pod only if it is this request's.
func (p *Provider) adopt(pod *corev1.Pod, pl plan) error {
	m := marksOf(pod.ObjectMeta)
	switch {
	case !m.Managed || pod.Labels[labelProvider] != p.name:
		return fmt.Errorf("%w: pod %s/%s exists without this provider's marks; egressd does not touch it", errNotOurs, p.cfg.Namespace, pod.Name)
	case m.UID != pl.req.UID || m.Installation != pl.req.Installation:
		return fmt.Errorf("%w: pod %s belongs to uid %q of installation %q, not uid %q of %q",
			errForeign, pod.Name, m.UID, m.Installation, pl.req.UID, pl.req.Installation)
	}
	return nil
}

// createPod makes the pod, on a free node of the target in mode node. A pod of the name that
// appeared meanwhile (another process) is adopted instead.
func (p *Provider) createPod(ctx context.Context, pl plan) (*corev1.Pod, error) {
	node := ""
	if p.cfg.Mode == ModeNode {
		unlock, err := p.targets.Lock(ctx, pl.target.Name)
		if err != nil {
			return nil, fmt.Errorf("%w: target %s: %w", errBusy, pl.target.Name, err)
		}
		defer unlock()
		if node, err = p.pickNode(ctx, pl.target); err != nil {
			return nil, err
		}
	}
	cctx, cancel := p.call(ctx)
	pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Create(cctx, p.podFor(pl, node, p.now()), metav1.CreateOptions{FieldManager: fieldManager})
	cancel()
	if apierrors.IsAlreadyExists(err) {
		if pod, err = p.getPod(ctx, pl.req.Name); err == nil {
			err = p.adopt(pod, pl)
		}
		return pod, err
	}
	if err != nil {
		return nil, err
	}
	p.log.Info("kubernetes pod created", "name", pod.Name, "target", pl.target.Name, "node", node)
	if p.afterPod != nil {
		p.afterPod(pod)
	}
	if node != "" {
		if err := p.keepNode(ctx, pod); err != nil {
			return nil, err
		}
	}
	return pod, nil
}

// fieldManager names egressd in the objects' managedFields.
const fieldManager = "egressd"

// ensureSecret makes the pod's Secret, or points a Secret of the name at this pod and
// rewrites its credential (one left from an earlier pod of the name).
func (p *Provider) ensureSecret(ctx context.Context, pl plan, pod *corev1.Pod) error {
	want := p.secretFor(pl, pod)
	secrets := p.cs.CoreV1().Secrets(p.cfg.Namespace)
	cctx, cancel := p.call(ctx)
	defer cancel()
	_, err := secrets.Create(cctx, want, metav1.CreateOptions{FieldManager: fieldManager})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	have, err := secrets.Get(cctx, pl.req.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if have.Labels[labelProvider] != p.name || have.Labels[labelManaged] != "true" {
		return fmt.Errorf("%w: Secret %s/%s exists without this provider's marks; egressd does not touch it", errNotOurs, p.cfg.Namespace, have.Name)
	}
	if ownedBy(have, pod) {
		return nil // this pod's own: a second Create keeps its credential
	}
	want.ResourceVersion = have.ResourceVersion
	_, err = secrets.Update(cctx, want, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

func ownedBy(s *corev1.Secret, pod *corev1.Pod) bool {
	for _, o := range s.OwnerReferences {
		if o.Kind == "Pod" && o.UID == pod.UID {
			return true
		}
	}
	return false
}

func (p *Provider) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	return p.cs.CoreV1().Pods(p.cfg.Namespace).Get(cctx, name, metav1.GetOptions{})
}
