package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Serve runs a forward proxy on ln until ctx ends: egressd's own (forwardproxy.Serve), passed
// in so that this package imports no provider. authFile is "" for no auth; source is the
// address its traffic leaves from.
type Serve func(ctx context.Context, ln net.Listener, authFile, source string) error

// Modes, as the provider's config names them.
const (
	ModeNode = "node"
	ModePod  = "pod"
)

// The Secret key and the pod's container the provider writes (providers/kubernetes, pod.go).
const (
	authKey       = "auth"
	containerName = "proxy"
)

// Kubelet plays the kubelet (and, in mode pod, the scheduler and the pod network) for one
// namespace: a pod whose Secret exists gets a real egressd forward proxy listening on its
// address and port, with the Secret's credential as its auth file, and then the status a
// kubelet writes (Running, pod IP, host IP, Ready). A pod being deleted loses its proxy and
// is removed, as a kubelet does once its containers stopped. In mode node the address is the
// node's ExternalIP (a 127.x address the test gives the node); in mode pod each pod gets the
// next address of 127.0.102.0/24.
type Kubelet struct {
	cs    kubernetes.Interface
	ns    string
	mode  string
	dir   string
	serve Serve

	mu      sync.Mutex
	running map[types.UID]context.CancelFunc
	nextIP  int

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
}

// StartKubelet runs a kubelet for namespace ns, as cs (an admin), writing auth files in dir,
// until Stop.
func StartKubelet(cs kubernetes.Interface, ns, mode, dir string, serve Serve) *Kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &Kubelet{cs: cs, ns: ns, mode: mode, dir: dir, serve: serve, running: map[types.UID]context.CancelFunc{},
		cancel: cancel, errs: make(chan error, 64)}
	k.wg.Go(func() { k.loop(ctx) })
	return k
}

// Stop ends the loop and every proxy, and returns what went wrong meanwhile.
func (k *Kubelet) Stop() error {
	k.cancel()
	k.wg.Wait()
	close(k.errs)
	var errs []error
	for err := range k.errs {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (k *Kubelet) fail(err error) {
	select {
	case k.errs <- err:
	default:
	}
}

func (k *Kubelet) loop(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := k.sync(ctx); err != nil && ctx.Err() == nil {
			k.fail(err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sync brings every pod one step on.
func (k *Kubelet) sync(ctx context.Context) error {
	pods, err := k.cs.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	seen := map[types.UID]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		seen[pod.UID] = true
		switch {
		case pod.DeletionTimestamp != nil:
			k.stopProxy(pod.UID)
			err = k.cs.CoreV1().Pods(k.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
				Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		case pod.Status.Phase == "" || pod.Status.Phase == corev1.PodPending:
			err = k.start(ctx, pod)
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for uid, cancel := range k.running {
		if !seen[uid] {
			cancel()
			delete(k.running, uid)
		}
	}
	return nil
}

// start runs the pod's proxy once its Secret is there, then reports the pod Running.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod) error {
	secret, err := k.cs.CoreV1().Secrets(k.ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && !ownedBy(secret, pod)) {
		return nil // the volume cannot be mounted yet
	}
	if err != nil {
		return err
	}
	addr, err := k.address(ctx, pod)
	if err != nil || !addr.IsValid() {
		return err
	}
	port := podPort(pod)
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		return err
	}
	authFile := ""
	if line, ok := secret.Data[authKey]; ok {
		authFile = filepath.Join(k.dir, string(pod.UID))
		if err := os.WriteFile(authFile, line, 0o600); err != nil {
			ln.Close()
			return err
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	k.mu.Lock()
	k.running[pod.UID] = cancel
	k.mu.Unlock()
	k.wg.Go(func() {
		if err := k.serve(pctx, ln, authFile, addr.String()); err != nil && !errors.Is(err, context.Canceled) {
			k.fail(err)
		}
	})
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: addr.String(), PodIP: addr.String(),
		PodIPs:     []corev1.PodIP{{IP: addr.String()}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	_, err = k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		k.stopProxy(pod.UID)
	}
	return err
}

// address is where the pod's proxy listens: its node's ExternalIP, or the next pod IP.
func (k *Kubelet) address(ctx context.Context, pod *corev1.Pod) (netip.Addr, error) {
	if k.mode == ModePod {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.nextIP++
		return netip.AddrFrom4([4]byte{127, 0, 102, byte(k.nextIP)}), nil
	}
	if pod.Spec.NodeName == "" {
		return netip.Addr{}, nil
	}
	node, err := k.cs.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return netip.Addr{}, nil // a kubelet that is gone runs nothing
	}
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeExternalIP {
			return netip.ParseAddr(a.Address)
		}
	}
	return netip.Addr{}, nil
}

func (k *Kubelet) stopProxy(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cancel, ok := k.running[uid]; ok {
		cancel()
		delete(k.running, uid)
	}
}

// Proxies is how many proxies run now.
func (k *Kubelet) Proxies() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.running)
}

// MakeNode registers a ready node with ExternalIP ip (and InternalIP 127.0.0.1) and the
// labels, as a kubelet would.
func MakeNode(ctx context.Context, cs kubernetes.Interface, name, ip string, labels map[string]string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	node, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	node.Status = corev1.NodeStatus{
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: ip}, {Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", name, err)
	}
	return nil
}

// ownedBy reports whether the Secret belongs to this pod (the provider's owner reference):
// a Secret of an earlier pod of the name is not mounted.
func ownedBy(s *corev1.Secret, pod *corev1.Pod) bool {
	for _, o := range s.OwnerReferences {
		if o.Kind == "Pod" && o.UID == pod.UID {
			return true
		}
	}
	return false
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
