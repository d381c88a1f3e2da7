package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/providers"
)

// Check reasons.
const (
	ReasonReachable                         = providers.CheckReachable
	ReasonUnreachable                       = providers.CheckUnreachable
	ReasonForbidden                         = providers.CheckForbidden
	ReasonNoNode      providers.CheckReason = "NoReadyNode"
	ReasonTimeout                           = providers.CheckTimeout
	ReasonAPIError                          = providers.CheckAPIError
)

// permission is one thing the provider does, as a SelfSubjectAccessReview asks it.
type permission struct {
	verb, resource string
	cluster        bool // cluster-scoped (nodes), else in the namespace
}

// permissions are exactly what the provider calls (deploy/kubernetes's Role and ClusterRole
// hold the same).
func (p *Provider) permissions() []permission {
	var out []permission
	for _, v := range []string{"get", "list", "create", "delete"} {
		out = append(out, permission{verb: v, resource: "pods"})
	}
	for _, v := range []string{"get", "list", "create", "update", "delete"} {
		out = append(out, permission{verb: v, resource: "secrets"})
	}
	if p.cfg.Mode == ModeNode {
		out = append(out, permission{verb: "get", resource: "nodes", cluster: true}, permission{verb: "list", resource: "nodes", cluster: true})
	}
	return out
}

// Check reports one target per configured target, in config order: the API server answers
// (its version, through discovery), this identity may do what the provider does (one
// SelfSubjectAccessReview per permission), and in mode node the target has a ready node,
// with how many are free. It takes no lock of Create or Delete.
func (p *Provider) Check(ctx context.Context) []providers.TargetStatus {
	start := time.Now()
	version, err := p.probe(ctx)
	latency := time.Since(start)
	out := make([]providers.TargetStatus, 0, len(p.cfg.Targets))
	for _, t := range p.cfg.Targets {
		ts := providers.TargetStatus{Name: t.Name, Address: p.cs.CoreV1().RESTClient().Get().URL().Host, Latency: latency,
			Details: map[string]string{"namespace": p.cfg.Namespace, "mode": p.cfg.Mode, "version": version}}
		switch {
		case err != nil:
			ts.Reason, ts.Message = checkReason(ctx, err), p.classify(opCheck, "", err).Error()
		case p.cfg.Mode == ModeNode:
			p.checkNodes(ctx, t, &ts)
		default:
			ts.Ready, ts.Reason = true, ReasonReachable
		}
		out = append(out, ts)
	}
	p.log.Debug("kubernetes cluster checked", "ready", err == nil, "latency", latency)
	return out
}

// errMissing: the identity lacks permissions the provider needs.
var errMissing = errors.New("missing permissions")

// probe asks the server's version and reviews every permission.
func (p *Provider) probe(ctx context.Context) (string, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	raw, err := p.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(cctx).Raw()
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("version answer: %w", err)
	}
	var missing []string
	for _, perm := range p.permissions() {
		attrs := &authzv1.ResourceAttributes{Verb: perm.verb, Resource: perm.resource}
		if !perm.cluster {
			attrs.Namespace = p.cfg.Namespace
		}
		r, err := p.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(cctx,
			&authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}, metav1.CreateOptions{})
		if err != nil {
			return v.GitVersion, err
		}
		if !r.Status.Allowed {
			missing = append(missing, perm.verb+" "+perm.resource)
		}
	}
	if len(missing) > 0 {
		return v.GitVersion, fmt.Errorf("%w in namespace %s: %s", errMissing, p.cfg.Namespace, strings.Join(missing, ", "))
	}
	return v.GitVersion, nil
}

// checkNodes says whether the target has a ready node, and how many are free.
func (p *Provider) checkNodes(ctx context.Context, t Target, ts *providers.TargetStatus) {
	nodes, err := p.targetNodes(ctx, t)
	var taken map[string][]corev1.Pod
	if err == nil {
		taken, err = p.nodeProxies(ctx)
	}
	if err != nil {
		ts.Reason, ts.Message = checkReason(ctx, err), p.classify(opCheck, "", err).Error()
		return
	}
	ready, free := 0, 0
	for _, n := range nodes {
		if nodeReady(&n) && !n.Spec.Unschedulable && p.nodeAddress(&n) != "" {
			ready++
			if len(taken[n.Name]) == 0 {
				free++
			}
		}
	}
	ts.Details["nodes"], ts.Details["readyNodes"], ts.Details["freeNodes"] = strconv.Itoa(len(nodes)), strconv.Itoa(ready), strconv.Itoa(free)
	if ready == 0 {
		ts.Reason = ReasonNoNode
		ts.Message = fmt.Sprintf("target %s has %d nodes, none ready and schedulable with an address of type %s",
			t.Name, len(nodes), strings.Join(p.cfg.AddressTypes, " or "))
		return
	}
	ts.Ready, ts.Reason = true, ReasonReachable
}

// checkReason names why the check failed. The round's own deadline wins.
func checkReason(ctx context.Context, err error) providers.CheckReason {
	switch {
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return ReasonTimeout
	case errors.Is(err, errMissing), apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return ReasonForbidden
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return ReasonAPIError
	}
	return ReasonUnreachable
}
