package kubernetes

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/egressd/egressd/providers"
)

// helperEnv makes the test binary the kill -9 test's child: a provisioner that makes a
// pod and then stops dead, until the parent kills it.
const helperEnv = "EGRESSD_KUBERNETES_KILL_CHILD"

// TestKillMidCreateChild is the child's body; it does nothing in a normal run.
func TestKillMidCreateChild(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("the kill -9 test's child process")
	}
	var kubeconfig, ns, name, uid string
	var port int
	if _, err := fmt.Sscan(spec, &kubeconfig, &ns, &name, &uid, &port); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(ns, ModePod, Target{Name: "group", NodeSelector: map[string]string{"egressd.test/any": "true"}})
	cfg.Kubeconfig = kubeconfig
	p, err := New("killed", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.afterPod = func(*corev1.Pod) {
		fmt.Println("pod-made")
		select {} // the parent's SIGKILL ends this
	}
	req := providers.CreateRequest{Name: name, UID: uid, Installation: testInstallation, Host: "group", Port: port,
		Auth: &providers.Auth{Username: "u", Password: "p"}}
	_, err = p.Create(context.Background(), req)
	t.Fatalf("Create returned (%v) instead of stopping after the pod", err)
}

// kill -9 of the provisioner between the pod and its Secret: the pod waits for its Secret
// (it never runs without its credential), and the next Create, by a new process, finishes
// the job with exactly one pod.
func TestKillMidCreateLeavesOnePod(t *testing.T) {
	needCluster(t)
	ns := namespace(t)
	startKubelet(t, ns, ModePod)
	kc, err := plane.Kubeconfig("killed")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	req := request("group", nextPort())
	req.Auth = &providers.Auth{Username: "u", Password: "p"}

	cmd := exec.Command(os.Args[0], "-test.run=^TestKillMidCreateChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+fmt.Sprint(kubeconfig, " ", ns, " ", req.Name, " ", req.UID, " ", req.Port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "pod-made\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child said %q, %v; want pod-made", line, err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()

	p := newProvider(t, "killed", testConfig(ns, ModePod, Target{Name: "group", NodeSelector: map[string]string{"egressd.test/any": "true"}}), nil)
	id := p.podID(req.Name)
	if inst, err := p.Get(t.Context(), id); err != nil || inst.State != providers.StateProvisioning {
		t.Fatalf("after the kill, Get = %s, %v; want a Provisioning pod waiting for its Secret", inst.State, err)
	}
	if _, err := admin.CoreV1().Secrets(ns).Get(t.Context(), req.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Secret exists after a kill before it: %v", err)
	}
	inst, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	settle(t, p, inst.ID)
	pods, err := admin.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: labelUID + "=" + req.UID})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("%d pods for the proxy (%v), want exactly 1", len(pods.Items), err)
	}
	s, err := admin.CoreV1().Secrets(ns).Get(t.Context(), req.Name, metav1.GetOptions{})
	if err != nil || !ownedBy(s, &pods.Items[0]) {
		t.Fatalf("Secret %v owned by the pod: %v", err, s != nil && ownedBy(s, &pods.Items[0]))
	}
}

// Delete removes the pod and its Secret; a second Delete and a Get after it agree it is gone.
func TestDeleteRemovesPodAndSecret(t *testing.T) {
	needCluster(t)
	ns := namespace(t)
	startKubelet(t, ns, ModeNode)
	group := uniq("del")
	makeNode(t, uniq(group), "127.0.104.1", map[string]string{"egressd.test/group": group})
	cfg := testConfig(ns, ModeNode, Target{Name: "group", NodeSelector: map[string]string{"egressd.test/group": group}})
	cfg.TerminationGracePeriod = ptr.To(Duration(5e9)) // graceful: the kubelet finishes the deletion
	p := newProvider(t, "deleting", cfg, nil)
	req := request("group", nextPort())
	req.Auth = &providers.Auth{Username: "u", Password: "p"}
	inst, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	settle(t, p, inst.ID)
	if err := p.Delete(t.Context(), inst.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to go", func() bool {
		_, err := admin.CoreV1().Pods(ns).Get(t.Context(), req.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if _, err := admin.CoreV1().Secrets(ns).Get(t.Context(), req.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret outlived Delete: %v", err)
	}
	if _, err := p.Get(t.Context(), inst.ID); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if err := p.Delete(t.Context(), inst.ID); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

// A Delete cut off between the pod and the Secret leaves the Secret: Leftovers lists it, and
// Delete of its ID removes it, but not once a Create brought its pod back.
func TestLeftoverSecrets(t *testing.T) {
	needCluster(t)
	ns := namespace(t)
	cfg := testConfig(ns, ModePod, Target{Name: "group", NodeSelector: map[string]string{"egressd.test/any": "true"}})
	p := newProvider(t, "leftovers", cfg, nil)
	reqs := []providers.CreateRequest{request("group", nextPort()), request("group", nextPort())}
	for _, req := range reqs {
		if _, err := p.Create(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		// The pod goes, as a Delete cut off after it would leave things.
		if err := admin.CoreV1().Pods(ns).Delete(t.Context(), req.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	left, err := p.Leftovers(t.Context())
	if err != nil || len(left) != 2 {
		t.Fatalf("Leftovers = %+v, %v; want the two Secrets", left, err)
	}
	for _, lo := range left {
		if lo.Host != "group" || lo.ModifiedAt.IsZero() || (lo.Name != reqs[0].Name && lo.Name != reqs[1].Name) {
			t.Errorf("leftover %+v: want host group, a time and one of the names", lo)
		}
	}
	// The first proxy's Create comes back before the collector: its Secret is kept.
	if _, err := p.Create(t.Context(), reqs[0]); err != nil {
		t.Fatal(err)
	}
	for _, lo := range left {
		if err := p.Delete(t.Context(), lo.ID); err != nil {
			t.Fatalf("Delete(%s): %v", lo.ID, err)
		}
	}
	_, err0 := admin.CoreV1().Secrets(ns).Get(t.Context(), reqs[0].Name, metav1.GetOptions{})
	_, err1 := admin.CoreV1().Secrets(ns).Get(t.Context(), reqs[1].Name, metav1.GetOptions{})
	if err0 != nil || !apierrors.IsNotFound(err1) {
		t.Errorf("after collecting: the recreated proxy's Secret %v (want kept), the leftover %v (want gone)", err0, err1)
	}
	if left, err := p.Leftovers(t.Context()); err != nil || len(left) != 0 {
		t.Errorf("Leftovers after collecting = %+v, %v", left, err)
	}
}

// Two installations share a namespace (and a provider name): each one's pods carry its own
// installation mark, which is what orphan GC keeps to, and neither's Delete or Leftovers
// touches the other's live proxies.
func TestSecondInstallationIsNeverTouched(t *testing.T) {
	needCluster(t)
	ns := namespace(t)
	startKubelet(t, ns, ModePod)
	cfg := testConfig(ns, ModePod, Target{Name: "group", NodeSelector: map[string]string{"egressd.test/any": "true"}})
	p := newProvider(t, "shared", cfg, nil)
	mine, theirs := request("group", nextPort()), request("group", nextPort())
	theirs.Installation = "inst-other"
	theirs.Name = providers.InstanceName(theirs.Installation, theirs.UID)
	for _, req := range []providers.CreateRequest{mine, theirs} {
		inst, err := p.Create(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		settle(t, p, inst.ID)
	}
	list, err := p.List(t.Context())
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	for _, inst := range list {
		want := map[string]string{mine.Name: mine.Installation, theirs.Name: theirs.Installation}[inst.Name]
		if inst.Marks.Installation != want || !inst.Marks.Managed {
			t.Errorf("%s carries installation %q (managed %v), want %q", inst.Name, inst.Marks.Installation, inst.Marks.Managed, want)
		}
	}
	// What the collector does with this installation's orphans: delete those it owns.
	for _, inst := range list {
		if inst.Marks.Installation == testInstallation {
			if err := p.Delete(t.Context(), inst.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if left, err := p.Leftovers(t.Context()); err != nil || len(left) != 0 {
		t.Errorf("Leftovers = %+v, %v; the other installation's live Secret is not one", left, err)
	}
	got, err := p.Get(t.Context(), p.podID(theirs.Name))
	if err != nil || got.State != providers.StateRunning {
		t.Errorf("the other installation's proxy: %s, %v; want it Running, untouched", got.State, err)
	}
	if _, err := admin.CoreV1().Secrets(ns).Get(t.Context(), theirs.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the other installation's Secret: %v", err)
	}
	// A Create for a name another installation holds is refused, not adopted.
	forged := theirs
	forged.Installation = testInstallation
	if _, err := p.Create(t.Context(), forged); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Create over another installation's pod = %v, want ErrPermanent", err)
	}
}
