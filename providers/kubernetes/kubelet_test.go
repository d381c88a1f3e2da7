package kubernetes

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// kubelet plays the kubelet (and, in mode pod, the scheduler and the pod network) for one
// namespace: a pod whose Secret exists gets a real egressd forward proxy listening on its
// address and port, with the Secret's credential as its auth file, and then the status a
// kubelet writes (Running, pod IP, host IP, Ready). A pod being deleted loses its proxy and
// is removed, as a kubelet does once its containers stopped. In mode node the address is the
// node's ExternalIP (a 127.x address the test gives the node); in mode pod each pod gets the
// next address of 127.0.102.0/24.
type kubelet struct {
	t    *testing.T
	ns   string
	mode string
	dir  string

	mu      sync.Mutex
	running map[types.UID]context.CancelFunc
	nextIP  int

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
}

func startKubelet(t *testing.T, ns, mode string) *kubelet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{t: t, ns: ns, mode: mode, dir: t.TempDir(), running: map[types.UID]context.CancelFunc{},
		cancel: cancel, errs: make(chan error, 64)}
	k.wg.Go(func() { k.loop(ctx) })
	t.Cleanup(k.stop)
	return k
}

// stop ends the loop and every proxy, and reports what went wrong meanwhile.
func (k *kubelet) stop() {
	k.cancel()
	k.wg.Wait()
	close(k.errs)
	for err := range k.errs {
		k.t.Errorf("kubelet: %v", err)
	}
}

func (k *kubelet) fail(err error) {
	select {
	case k.errs <- err:
	default:
	}
}

func (k *kubelet) loop(ctx context.Context) {
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
func (k *kubelet) sync(ctx context.Context) error {
	pods, err := admin.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
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
			err = admin.CoreV1().Pods(k.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
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
func (k *kubelet) start(ctx context.Context, pod *corev1.Pod) error {
	secret, err := admin.CoreV1().Secrets(k.ns).Get(ctx, pod.Name, metav1.GetOptions{})
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
	cfg := forwardproxy.Config{Listen: ln.Addr().String(), Source: addr.String()}
	if line, ok := secret.Data[authKey]; ok {
		cfg.AuthFile = filepath.Join(k.dir, string(pod.UID))
		if err := os.WriteFile(cfg.AuthFile, line, 0o600); err != nil {
			ln.Close()
			return err
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	k.mu.Lock()
	k.running[pod.UID] = cancel
	k.mu.Unlock()
	k.wg.Go(func() {
		if err := forwardproxy.Serve(pctx, ln, cfg); err != nil && !errors.Is(err, context.Canceled) {
			k.fail(err)
		}
	})
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: addr.String(), PodIP: addr.String(),
		PodIPs:     []corev1.PodIP{{IP: addr.String()}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	_, err = admin.CoreV1().Pods(k.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		k.stopProxy(pod.UID)
	}
	return err
}

// address is where the pod's proxy listens: its node's ExternalIP, or the next pod IP.
func (k *kubelet) address(ctx context.Context, pod *corev1.Pod) (netip.Addr, error) {
	if k.mode == ModePod {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.nextIP++
		return netip.AddrFrom4([4]byte{127, 0, 102, byte(k.nextIP)}), nil
	}
	if pod.Spec.NodeName == "" {
		return netip.Addr{}, nil
	}
	node, err := admin.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
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

func (k *kubelet) stopProxy(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cancel, ok := k.running[uid]; ok {
		cancel()
		delete(k.running, uid)
	}
}

// proxies is how many proxies run now.
func (k *kubelet) proxies() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.running)
}

// makeNode registers a ready node with ExternalIP ip and the labels, as a kubelet would.
func makeNode(t *testing.T, name, ip string, labels map[string]string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	node, err := admin.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	node.Status = corev1.NodeStatus{
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: ip}, {Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
	}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node %s status: %v", name, err)
	}
}

var nextPort = func() func() int {
	var mu sync.Mutex
	port := 23000
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		port++
		return port
	}
}()

func itoa(i int) string { return strconv.Itoa(i) }
