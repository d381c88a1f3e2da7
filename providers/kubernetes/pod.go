package kubernetes

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/providers"
)

// The marks and the provider's own bookkeeping, as labels (selectable) and annotations.
const (
	labelManaged      = "egressd.io/managed"
	labelProvider     = "egressd.io/provider"
	labelUID          = "egressd.io/uid"
	labelInstallation = "egressd.io/installation"
	labelTarget       = "egressd.io/target"
	labelMode         = "egressd.io/mode"
	annotCreatedAt    = "egressd.io/created-at" // RFC 3339 with nanoseconds: label values hold no ':'
	annotExpiresAt    = "egressd.io/expires-at" // the lifetime's end, RFC 3339; absent: none
	annotProxy        = "egressd.io/proxy"      // the proxy's name, for humans
)

// The container, its Secret volume and the file the proxy reads its credential from.
const (
	containerName = "proxy"
	volumeName    = "proxy-auth"
	authDir       = "/etc/egressd-proxy"
	authKey       = "auth"
	nodeHostLabel = "kubernetes.io/hostname"
)

// ownSelector selects every pod and Secret this provider made, in any installation.
func (p *Provider) ownSelector() string {
	return labels.SelectorFromSet(labels.Set{labelManaged: "true", labelProvider: p.name}).String()
}

// meta is the object metadata a proxy's pod and Secret share.
func (p *Provider) meta(pl plan, createdAt time.Time) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name:      pl.req.Name,
		Namespace: p.cfg.Namespace,
		Labels: map[string]string{
			labelManaged: "true", labelProvider: p.name, labelUID: pl.req.UID,
			labelInstallation: pl.req.Installation, labelTarget: pl.target.Name, labelMode: p.cfg.Mode,
		},
		Annotations: map[string]string{
			annotCreatedAt: createdAt.UTC().Format(time.RFC3339Nano),
			annotProxy:     pl.req.Proxy,
		},
	}
	if exp := providers.ExpiryOf(createdAt, pl.req.Lifetime); !exp.IsZero() {
		m.Annotations[annotExpiresAt] = exp.UTC().Format(time.RFC3339Nano)
	}
	return m
}

// marksOf reads the marks back from an object's labels and annotations.
func marksOf(m metav1.ObjectMeta) providers.Marks {
	out := providers.Marks{
		Managed:      m.Labels[labelManaged] == "true",
		UID:          m.Labels[labelUID],
		Installation: m.Labels[labelInstallation],
	}
	if t, err := time.Parse(time.RFC3339Nano, m.Annotations[annotCreatedAt]); err == nil {
		out.CreatedAt = t.UTC()
	}
	if t, err := time.Parse(time.RFC3339Nano, m.Annotations[annotExpiresAt]); err == nil {
		out.ExpiresAt = t.UTC()
	}
	return out
}

// podFor is the proxy's pod. Nothing in it is secret: the credential is in the Secret of the
// same name, mounted read-only for the proxy's user only.
func (p *Provider) podFor(pl plan, node string, createdAt time.Time) *corev1.Pod {
	args := []string{"forward-proxy", "--listen", "0.0.0.0:" + strconv.Itoa(pl.req.Port), "--instance", pl.req.Name}
	if pl.req.Auth != nil {
		args = append(args, "--auth-file", authDir+"/"+authKey)
	}
	uid := p.cfg.RunAsUser
	port := corev1.ContainerPort{Name: "proxy", ContainerPort: int32(pl.req.Port), Protocol: corev1.ProtocolTCP}
	spec := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyAlways,
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(p.cfg.grace),
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: &uid, RunAsGroup: &uid,
			FSGroup: &uid, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Tolerations:      p.tolerations(),
		ImagePullSecrets: p.pullSecrets(),
		Containers: []corev1.Container{{
			Name: containerName, Image: p.cfg.Image, ImagePullPolicy: corev1.PullPolicy(p.cfg.ImagePullPolicy),
			Args: args, Resources: p.resources(),
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
				RunAsNonRoot: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			VolumeMounts: []corev1.VolumeMount{{Name: volumeName, MountPath: authDir, ReadOnly: true}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(pl.req.Port))}}, PeriodSeconds: 5},
		}},
		Volumes: []corev1.Volume{{Name: volumeName, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: pl.req.Name, DefaultMode: ptr.To[int32](0o440)}}}},
	}
	if p.cfg.Mode == ModeNode {
		// The node's own network: the proxy's traffic leaves from the node's address. The
		// host port makes the kubelet refuse a second pod on the port instead of crash-looping.
		spec.HostNetwork, spec.DNSPolicy, spec.NodeName = true, corev1.DNSClusterFirstWithHostNet, node
		port.HostPort = port.ContainerPort
	} else if pl.target.Node != "" {
		spec.NodeSelector = map[string]string{nodeHostLabel: pl.target.Node}
	} else {
		spec.NodeSelector = pl.target.NodeSelector
	}
	spec.Containers[0].Ports = []corev1.ContainerPort{port}
	return &corev1.Pod{ObjectMeta: p.meta(pl, createdAt), Spec: spec}
}

// secretFor is the proxy's Secret, owned by its pod: Kubernetes' garbage collector removes
// it with the pod, and Delete removes it itself.
func (p *Provider) secretFor(pl plan, pod *corev1.Pod) *corev1.Secret {
	m := p.meta(pl, createdAtOf(pod))
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
	s := &corev1.Secret{ObjectMeta: m, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	if line := providers.AuthFileLine(pl.req.Auth); line != "" {
		s.Data[authKey] = []byte(line + "\n")
	}
	return s
}

func createdAtOf(pod *corev1.Pod) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, pod.Annotations[annotCreatedAt])
	return t
}

func (p *Provider) tolerations() []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range p.cfg.Tolerations {
		out = append(out, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value,
			Effect: corev1.TaintEffect(t.Effect), TolerationSeconds: t.TolerationSeconds})
	}
	return out
}

func (p *Provider) pullSecrets() []corev1.LocalObjectReference {
	var out []corev1.LocalObjectReference
	for _, s := range p.cfg.ImagePullSecrets {
		out = append(out, corev1.LocalObjectReference{Name: s})
	}
	return out
}

// resources turns the validated quantities into the container's requirements.
func (p *Provider) resources() corev1.ResourceRequirements {
	list := func(r ResourceList) corev1.ResourceList {
		out := corev1.ResourceList{}
		if r.CPU != "" {
			out[corev1.ResourceCPU] = resource.MustParse(r.CPU)
		}
		if r.Memory != "" {
			out[corev1.ResourceMemory] = resource.MustParse(r.Memory)
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return corev1.ResourceRequirements{Requests: list(p.cfg.Resources.Requests), Limits: list(p.cfg.Resources.Limits)}
}
