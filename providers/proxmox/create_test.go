package proxmox

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/proxmox/pvetest"
)

const cloneRoute = "POST /nodes/{node}/qemu/{vmid}/clone"

// guests are the simulator's VMs that are not templates.
func guests(sim *pvetest.Server) []pvetest.VM {
	var out []pvetest.VM
	for _, v := range sim.VMs() {
		if !v.Template {
			out = append(out, v)
		}
	}
	return out
}

func mustCreate(t *testing.T, p *Provider, req providers.CreateRequest) providers.Instance {
	t.Helper()
	inst, err := p.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create(%s): %v", req.Name, err)
	}
	return inst
}

// A Create cut off after PVE accepted the clone (a kill -9 of the provisioner, here its
// context ended) leaves a locked VM without a name (F8). The next Create, by a fresh
// provider as after a restart, waits for the lock, finds its own marks at the VMID and adopts
// the VM: one clone call, one VM, with our marks.
func TestKillMidCloneAdopts(t *testing.T) {
	sim := newSim(t, pvetest.Options{Timing: pvetest.Timing{Clone: 1500 * time.Millisecond}})
	cfg := simConfig(t, sim)
	name := providers.InstanceName(testInstallation, "u1")
	req := testRequest(name, "u1")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := newTestProvider(t, cfg, nil).Create(ctx, req)
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for sim.Calls(cloneRoute) == 0 || len(guests(sim)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the clone never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mid := guests(sim)[0]
	if mid.Name != "" || mid.Lock != "clone" || mid.Status != "unknown" {
		t.Fatalf("mid-clone VM %+v, want a nameless, clone-locked entry (F8)", mid)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cut-off Create succeeded")
	}

	p := newTestProvider(t, cfg, nil) // the restart
	inst := mustCreate(t, p, req)
	if n := sim.Calls(cloneRoute); n != 1 {
		t.Errorf("%d clone calls, want 1: the second Create cloned again", n)
	}
	vms := guests(sim)
	if len(vms) != 1 || vms[0].VMID != mid.VMID || vms[0].Name != name {
		t.Fatalf("VMs after the restart: %+v, want only VMID %d named %s", vms, mid.VMID, name)
	}
	if m, found := parseMarks(vms[0].Config["description"]); !found || m.UID != "u1" || m.Installation != testInstallation {
		t.Errorf("the adopted VM's marks: %+v", m)
	}
	if got := settle(t, p, inst.ID); got.Marks.UID != "u1" || got.Port != testPort {
		t.Errorf("settled %+v", got)
	}
}

// Ten Creates on one node with maxConcurrentOps 2: the simulator never sees more than two
// clones in flight (it fails a third with PVE's lock timeout, CloneContention), the lock
// timeouts injected into clone tasks, clone calls, config writes and starts are retried, and
// all ten run.
func TestTenCreatesOnOneNode(t *testing.T) {
	sim := newSim(t, pvetest.Options{CloneContention: 2, Timing: pvetest.Timing{Clone: 150 * time.Millisecond}})
	cfg := simConfig(t, sim)
	cfg.Nodes[0].MaxConcurrentOps = 2
	p := newTestProvider(t, cfg, nil)
	lock := pvetest.Fault{Kind: pvetest.FaultLockTimeout}
	lockSync := pvetest.Fault{Kind: pvetest.FaultLockTimeoutSync}
	sim.FailNext(pvetest.OpClone, testNode, lock, lockSync, lock)
	sim.FailNext(pvetest.OpConfig, testNode, lockSync, lockSync)
	sim.FailNext(pvetest.OpStart, testNode, lock)

	insts := make([]providers.Instance, 10)
	var wg sync.WaitGroup
	for i := range insts {
		wg.Go(func() {
			uid := "u" + string(rune('a'+i))
			inst, err := p.Create(context.Background(), testRequest(providers.InstanceName(testInstallation, uid), uid))
			if err != nil {
				t.Errorf("Create %d: %v", i, err)
			}
			insts[i] = inst
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if got := sim.MaxClonesInFlight(testNode, "local-lvm"); got != 2 {
		t.Errorf("at most %d clones in flight, want exactly 2 (the limit, used)", got)
	}
	if n := sim.Calls(cloneRoute); n != 10+3 {
		t.Errorf("%d clone calls, want 13 (10 + 3 retried lock timeouts)", n)
	}
	if n := sim.Calls("PUT /nodes/{node}/qemu/{vmid}/config"); n != 10+2 {
		t.Errorf("%d config writes, want 12 (10 + 2 retried lock timeouts)", n)
	}
	if n := sim.Calls("POST /nodes/{node}/qemu/{vmid}/status/start"); n != 10+1 {
		t.Errorf("%d starts, want 11 (10 + 1 retried lock timeout)", n)
	}
	addrs := map[string]bool{}
	for _, inst := range insts {
		got := settle(t, p, inst.ID)
		addrs[got.Address] = true
	}
	if len(addrs) != 10 || len(guests(sim)) != 10 {
		t.Errorf("%d addresses, %d VMs, want 10 of each", len(addrs), len(guests(sim)))
	}
}

// A paused VM (F14: running in the resources, qmpstatus paused) is Stopped, so the reconciler
// replaces it: Delete and Create again give a running proxy, one VM.
func TestPausedIsStoppedAndReplaced(t *testing.T) {
	sim := newSim(t, pvetest.Options{})
	p := newTestProvider(t, simConfig(t, sim), nil)
	req := testRequest(providers.InstanceName(testInstallation, "u1"), "u1")
	inst := settle(t, p, mustCreate(t, p, req).ID)
	vmid, _, _ := parseID(inst.ID)
	if err := sim.Pause(vmid); err != nil {
		t.Fatal(err)
	}
	got, err := p.Get(context.Background(), inst.ID)
	if err != nil || got.State != providers.StateStopped {
		t.Fatalf("paused VM: %+v, %v, want Stopped", got, err)
	}
	if err := p.Delete(context.Background(), inst.ID); err != nil {
		t.Fatal(err)
	}
	again := settle(t, p, mustCreate(t, p, req).ID)
	if again.State != providers.StateRunning || len(guests(sim)) != 1 {
		t.Errorf("replacement %+v, %d VMs", again, len(guests(sim)))
	}
}

// A started VM whose guest agent is not up yet (F5: "QEMU guest agent is not running") is
// Provisioning, from Create and from Get, never NotFound; other agent errors are Transient.
func TestAgentNotRunningIsProvisioning(t *testing.T) {
	sim := newSim(t, pvetest.Options{Timing: pvetest.Timing{Boot: time.Hour}})
	p := newTestProvider(t, simConfig(t, sim), nil)
	inst := mustCreate(t, p, testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))
	if inst.State != providers.StateProvisioning {
		t.Errorf("Create returned %s, want Provisioning", inst.State)
	}
	for range 3 {
		got, err := p.Get(context.Background(), inst.ID)
		if err != nil || got.State != providers.StateProvisioning || got.Address != "" {
			t.Fatalf("Get = %+v, %v, want Provisioning", got, err)
		}
	}
	// A human removed agent=1: PVE says "No QEMU guest agent configured" (F5).
	vmid, _, _ := parseID(inst.ID)
	if err := p.api.setConfig(context.Background(), testNode, vmid, url.Values{"agent": {"0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(context.Background(), inst.ID); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "No QEMU guest agent configured") {
		t.Errorf("agent not configured: %v, want Transient", err)
	}
}

// Each step resumes after a failure: an upload whose task fails leaves a cloned VM without
// its seed, which Get calls Provisioning (not Stopped: it never started); the next Create
// picks up from the seed step, with no second clone.
func TestCreateResumesAfterAFailedStep(t *testing.T) {
	sim := newSim(t, pvetest.Options{})
	p := newTestProvider(t, simConfig(t, sim), nil)
	req := testRequest(providers.InstanceName(testInstallation, "u1"), "u1")
	sim.FailNext(pvetest.OpUpload, testNode, pvetest.Fault{Kind: pvetest.FaultTaskFailed, Exit: "error during upload"})
	if _, err := p.Create(context.Background(), req); !errors.Is(err, providers.ErrTransient) {
		t.Fatalf("Create with a failing upload: %v, want Transient", err)
	}
	vms := guests(sim)
	if len(vms) != 1 {
		t.Fatalf("%d VMs after the failed upload", len(vms))
	}
	id := idOf(vms[0].VMID, req.Name)
	if got, err := p.Get(context.Background(), id); err != nil || got.State != providers.StateProvisioning {
		t.Errorf("Get of a VM cut off before its start: %+v, %v, want Provisioning", got, err)
	}
	sim.FailNext(pvetest.OpStart, testNode, pvetest.Fault{Kind: pvetest.FaultTaskFailed, Exit: "start failed: QEMU exited with code 1"})
	if _, err := p.Create(context.Background(), req); !errors.Is(err, providers.ErrTransient) {
		t.Fatalf("Create with a failing start: %v, want Transient", err)
	}
	inst := settle(t, p, mustCreate(t, p, req).ID)
	if sim.Calls(cloneRoute) != 1 || inst.ID != id {
		t.Errorf("%d clones, ID %s, want 1 and %s", sim.Calls(cloneRoute), inst.ID, id)
	}
	cfg := guests(sim)[0].Config
	if !strings.Contains(cfg["ide2"], seedFile(req.Name)) || cfg["agent"] != "1" || cfg["cores"] != "1" ||
		cfg["memory"] != "512" || !strings.Contains(cfg["tags"], tag) || diskGiB(cfg["scsi0"]) != 4 {
		t.Errorf("config after Create: %v", cfg)
	}
}

// A VMID taken by a VM that is demonstrably someone else's (readable, other marks or none) is
// skipped: the next VMID is tried. Our name on someone else's VM is Permanent; two VMs with
// our name are Permanent, naming both.
func TestVMIDAndNameOwnership(t *testing.T) {
	sim := newSim(t, pvetest.Options{})
	p := newTestProvider(t, simConfig(t, sim), nil)
	name := providers.InstanceName(testInstallation, "u1")
	first := p.vmidAt(p.firstVMID(name), 0)
	if err := sim.PutVM(testNode, first, map[string]string{"name": "someones-vm", "description": "egressd-managed=true\negressd-uid=other\n"}); err != nil {
		t.Fatal(err)
	}
	inst := mustCreate(t, p, testRequest(name, "u1"))
	if vmid, _, _ := parseID(inst.ID); vmid != p.vmidAt(p.firstVMID(name), 1) {
		t.Errorf("created at %s, want the VMID after %d", inst.ID, first)
	}
	if v, _ := sim.VM(first); v.Name != "someones-vm" {
		t.Errorf("the foreign VM was touched: %+v", v)
	}

	_, err := p.Create(context.Background(), testRequest(name, "u2"))
	if !errors.Is(err, providers.ErrPermanent) || !errors.Is(err, errForeign) {
		t.Errorf("our name, another UID: %v, want Permanent foreign", err)
	}
	other := providers.InstanceName(testInstallation, "u3")
	sim.PutVM(testNode, 101, map[string]string{"name": other})
	if _, err := p.Create(context.Background(), testRequest(other, "u3")); !errors.Is(err, errNotOurs) || !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("our name on an unmarked VM: %v, want Permanent", err)
	}
	sim.PutVM(testNode, 102, map[string]string{"name": name})
	_, err = p.Create(context.Background(), testRequest(name, "u1"))
	if !errors.Is(err, errTwins) || !strings.Contains(err.Error(), "102") {
		t.Errorf("two VMs named %s: %v, want Permanent naming both", name, err)
	}
}

// Delete stops and destroys the VM and removes its seed ISO; a second Delete, and a Delete
// after a kill between the two, succeed and leave nothing.
func TestDeleteRemovesVMAndSeed(t *testing.T) {
	sim := newSim(t, pvetest.Options{})
	p := newTestProvider(t, simConfig(t, sim), nil)
	req := testRequest(providers.InstanceName(testInstallation, "u1"), "u1")
	inst := settle(t, p, mustCreate(t, p, req).ID)
	seed := "local:iso/" + seedFile(req.Name)
	if !slices.Contains(sim.Volumes(testNode, "local"), seed) {
		t.Fatalf("no seed %s in %v", seed, sim.Volumes(testNode, "local"))
	}
	if err := p.Delete(context.Background(), inst.ID); err != nil {
		t.Fatal(err)
	}
	if len(guests(sim)) != 0 || slices.Contains(sim.Volumes(testNode, "local"), seed) {
		t.Errorf("left behind: VMs %v, volumes %v", guests(sim), sim.Volumes(testNode, "local"))
	}
	if _, err := p.Get(context.Background(), inst.ID); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	// A seed whose VM is gone (a Delete killed between the two) goes with the next Delete.
	inst = settle(t, p, mustCreate(t, p, req).ID)
	sim.FailNext(pvetest.OpDeleteVolume, testNode, pvetest.Fault{Kind: pvetest.FaultTaskFailed, Exit: "imgdel failed"})
	if err := p.Delete(context.Background(), inst.ID); !errors.Is(err, providers.ErrTransient) {
		t.Fatalf("Delete with a failing seed delete: %v", err)
	}
	if len(guests(sim)) != 0 || !slices.Contains(sim.Volumes(testNode, "local"), seed) {
		t.Fatalf("after the cut-off Delete: VMs %v, volumes %v", guests(sim), sim.Volumes(testNode, "local"))
	}
	if err := p.Delete(context.Background(), inst.ID); err != nil || slices.Contains(sim.Volumes(testNode, "local"), seed) {
		t.Errorf("second Delete: %v, volumes %v", err, sim.Volumes(testNode, "local"))
	}
}

// A VLAN tag is set on net0 with its MAC kept; the agent's address is found by that MAC.
func TestVLANKeepsMAC(t *testing.T) {
	sim := newSim(t, pvetest.Options{})
	cfg := simConfig(t, sim)
	cfg.VLANTag = 4
	p := newTestProvider(t, cfg, nil)
	inst := settle(t, p, mustCreate(t, p, testRequest(providers.InstanceName(testInstallation, "u1"), "u1")).ID)
	net0 := guests(sim)[0].Config["net0"]
	if !strings.Contains(net0, "tag=4") || !strings.Contains(net0, "bridge=") || macOf(net0) == "" {
		t.Errorf("net0 %q", net0)
	}
	if inst.Address == "" {
		t.Error("no address")
	}
}

// A node pveproxy cannot reach (596) makes its VMs' status unknown: Get and Delete are
// Transient, never NotFound or success; List leaves them out (GC then leaves them alone);
// Create on it is Transient.
func TestNodeDown(t *testing.T) {
	sim := newSim(t, pvetest.Options{})
	p := newTestProvider(t, simConfig(t, sim), nil)
	req := testRequest(providers.InstanceName(testInstallation, "u1"), "u1")
	inst := settle(t, p, mustCreate(t, p, req).ID)
	if err := sim.SetNodeDown(testNode, pvetest.StatusTimedOut); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Get(ctx, inst.ID); !errors.Is(err, providers.ErrTransient) {
		t.Errorf("Get: %v, want Transient", err)
	}
	if err := p.Delete(ctx, inst.ID); !errors.Is(err, providers.ErrTransient) {
		t.Errorf("Delete: %v, want Transient", err)
	}
	if list, err := p.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List: %v, %v, want none and no error", list, err)
	}
	other := testRequest(providers.InstanceName(testInstallation, "u2"), "u2")
	if _, err := p.Create(ctx, other); !errors.Is(err, providers.ErrTransient) {
		t.Errorf("Create: %v, want Transient", err)
	}
	sim.SetNodeDown(testNode, 0)
	if got := settle(t, p, inst.ID); got.ID != inst.ID {
		t.Errorf("after the node came back: %+v", got)
	}
}

// A proxy on another node than the template's is a full clone with target (and the storage,
// shared, as PVE requires for a clone to another node); one on the template's node with no
// storage set is a linked clone.
func TestCloneModes(t *testing.T) {
	storages := append(pvetest.DefaultStorages(), pvetest.Storage{ID: "ceph", Type: "rbd", Content: []string{"images"}, Shared: true})
	sim := newSim(t, pvetest.Options{Nodes: []string{"pv1-1", "pv1-2"}, Storages: storages})
	cfg := simConfig(t, sim)
	cfg.Nodes = []NodeConfig{{Name: "pv1-1"}, {Name: "pv1-2"}}
	linked := newTestProvider(t, cfg, nil)
	cfg.Storage = "ceph"
	full := newTestProvider(t, cfg, nil)

	a := settle(t, linked, mustCreate(t, linked, testRequest(providers.InstanceName(testInstallation, "u1"), "u1")).ID)
	req := testRequest(providers.InstanceName(testInstallation, "u2"), "u2")
	req.Host = "pv1-2"
	b := settle(t, full, mustCreate(t, full, req).ID)
	if a.Host != "pv1-1" || b.Host != "pv1-2" {
		t.Errorf("hosts %s, %s", a.Host, b.Host)
	}
	va, _ := sim.VM(mustVMID(t, a.ID))
	vb, _ := sim.VM(mustVMID(t, b.ID))
	if !strings.Contains(va.Config["scsi0"], "base-9001-disk-0/") {
		t.Errorf("not a linked clone: scsi0 %q", va.Config["scsi0"])
	}
	if !strings.HasPrefix(vb.Config["scsi0"], "ceph:") || vb.Node != "pv1-2" {
		t.Errorf("not a full clone onto ceph on pv1-2: %s %q", vb.Node, vb.Config["scsi0"])
	}
	if !slices.Contains(sim.Volumes("pv1-2", "local"), "local:iso/"+seedFile(req.Name)) {
		t.Errorf("the seed is not on pv1-2's ISO storage: %v", sim.Volumes("pv1-2", "local"))
	}
	if err := full.Delete(context.Background(), b.ID); err != nil || len(sim.Volumes("pv1-2", "local")) != 0 {
		t.Errorf("Delete: %v, volumes left %v", err, sim.Volumes("pv1-2", "local"))
	}
}

func mustVMID(t *testing.T, id string) int {
	t.Helper()
	vmid, _, err := parseID(id)
	if err != nil {
		t.Fatal(err)
	}
	return vmid
}
