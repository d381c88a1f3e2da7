package pvetest

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowClone holds every clone's lock long enough to look at it mid-clone; the test ends it by
// closing the simulator.
func slowClone(o *Options) { o.Timing.Clone = time.Hour }

// Mid-clone state (F7, F8, F4, F3): the new VM is in cluster/resources without a name, status
// unknown, lock clone; its config is only the lock; a config write is refused with "VM is
// locked (clone)"; a second clone onto its VMID fails synchronously; a start is accepted
// and waits for the lock.
func TestMidClone(t *testing.T) {
	e := newEnv(t, slowClone)
	c := e.c
	const id = 100100
	upid := c.upid("POST", vmPath(tmplID)+"/clone", cloneReq(id, "proxy-mid"))

	entry := resourceEntry(t, e, id)
	if entry == nil {
		t.Fatalf("no cluster/resources entry for %d", id)
	}
	if _, named := entry["name"]; named || entry["status"] != "unknown" || entry["lock"] != "clone" ||
		entry["id"] != fmt.Sprintf("qemu/%d", id) || entry["type"] != "qemu" || entry["node"] != node {
		t.Errorf("mid-clone entry %v (F8: no name, status unknown, lock clone)", entry)
	}
	var conf map[string]any
	c.data("GET", vmPath(id)+"/config", nil, &conf)
	if len(conf) != 2 || conf["lock"] != "clone" || conf["digest"] == nil {
		t.Errorf("mid-clone config %v, want only lock and digest", conf)
	}
	var cur map[string]any
	c.data("GET", vmPath(id)+"/status/current", nil, &cur)
	if cur["status"] != "stopped" || cur["lock"] != "clone" {
		t.Errorf("mid-clone status/current %v", cur)
	}
	c.do("PUT", vmPath(id)+"/config", url.Values{"cores": {"2"}}).wantError(t, 500, "VM is locked (clone)") // F7
	c.do("POST", vmPath(tmplID)+"/clone", cloneReq(id, "proxy-again")).
		wantError(t, 500, "unable to create VM 100100: config file already exists") // F4
	c.do("DELETE", vmPath(id), nil).wantError(t, 500, "VM is locked (clone)")
	c.do("GET", vmPath(id)+"/agent/network-get-interfaces", nil).wantError(t, 500, "VM 100100 is not running")

	start := c.upid("POST", vmPath(id)+"/status/start", nil) // F3: accepted
	if _, done := e.sim.TaskDone(start); done {
		t.Error("start finished while the clone holds the lock")
	}
	if _, done := e.sim.TaskDone(upid); done {
		t.Error("clone finished early")
	}
	if n := e.sim.ClonesInFlight(node, "local-lvm"); n != 1 {
		t.Errorf("clones in flight %d, want 1", n)
	}
}

// F3: the queued start runs once the clone ends, and the VM runs.
func TestStartQueuesBehindClone(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Timing.Clone = 200 * time.Millisecond })
	c := e.c
	const id = 100101
	clone := c.upid("POST", vmPath(tmplID)+"/clone", cloneReq(id, "proxy-queued"))
	start := c.upid("POST", vmPath(id)+"/status/start", nil)
	if exit := c.wait(start); exit != ExitOK {
		t.Fatalf("queued start ended %q", exit)
	}
	if exit, done := e.sim.TaskDone(clone); !done || exit != ExitOK {
		t.Fatalf("start ended before the clone (%q, %v)", exit, done)
	}
	if v, _ := e.sim.VM(id); v.Status != "running" {
		t.Fatalf("VM %+v after the queued start", v)
	}
}

// Clone parameters: linked from a template, full on request or from a plain VM, refusals of
// qemu-server's load_and_check (API2/Qemu.pm clone_vm; F15 for a storage without images).
func TestCloneModes(t *testing.T) {
	plain := Template{VMID: 9100, Plain: true, Name: "plain-vm"}
	withStorages := func(o *Options) {
		o.Nodes = []string{node, "pv1-2"}
		o.Templates = []Template{DefaultTemplate(), plain}
		o.Storages = append(DefaultStorages(), Storage{ID: "fast", Type: "lvmthin", Content: []string{"images"}},
			Storage{ID: "ceph", Type: "rbd", Content: []string{"images"}, Shared: true})
	}
	tests := []struct {
		name  string
		src   int
		extra []string
		scsi0 string // want, on success
		node  string // where the clone lands; default pv1-1
		code  int
		msg   string
		keys  []string
	}{
		{name: "template default is linked", src: tmplID, scsi0: "local-lvm:base-9001-disk-0/vm-100200-disk-0,size=3G"},
		{name: "template full", src: tmplID, extra: []string{"full", "1"}, scsi0: "local-lvm:vm-100200-disk-0,size=3G"},
		{name: "template full onto another storage", src: tmplID, extra: []string{"full", "1", "storage", "fast"},
			scsi0: "fast:vm-100200-disk-0,size=3G"},
		{name: "full onto shared storage on another node", src: tmplID, extra: []string{"full", "1", "storage", "ceph", "target", "pv1-2"},
			scsi0: "ceph:vm-100200-disk-0,size=3G", node: "pv1-2"},
		{name: "plain VM default is full", src: 9100, scsi0: "local-lvm:vm-100200-disk-0,size=3G"},
		{name: "plain VM linked refused", src: 9100, extra: []string{"full", "0"}, code: 500,
			msg: "Linked clone feature is not supported for 'local-lvm:vm-9100-disk-0' (scsi0)"},
		{name: "storage on a linked clone", src: tmplID, extra: []string{"storage", "fast"}, code: 500,
			msg: "parameter 'storage' not allowed for linked clones"},
		{name: "F15 storage without images", src: tmplID, extra: []string{"full", "1", "storage", "local"}, code: 400,
			msg: "Parameter verification failed.", keys: []string{"storage"}},
		{name: "unknown storage", src: tmplID, extra: []string{"full", "1", "storage", "nope"}, code: 500,
			msg: "storage 'nope' does not exist"},
		{name: "F2 missing source", src: 9999, code: 500,
			msg: "Configuration file 'nodes/pv1-1/qemu-server/9999.conf' does not exist"},
		{name: "bad name", src: tmplID, extra: []string{"name", "not a name"}, code: 400,
			msg: "Parameter verification failed.", keys: []string{"name"}},
		{name: "unknown target node", src: tmplID, extra: []string{"target", "pv1-9"}, code: 500,
			msg: "no such cluster node 'pv1-9'"},
		{name: "target node with local disks", src: tmplID, extra: []string{"target", "pv1-2"}, code: 500,
			msg: "can't clone VM to node 'pv1-2' (VM uses local storage)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, withStorages)
			form := cloneReq(100200, "proxy-mode", tt.extra...)
			if tt.code != 0 {
				e.c.do("POST", vmPath(tt.src)+"/clone", form).wantError(t, tt.code, tt.msg, tt.keys...)
				if _, ok := e.sim.VM(100200); ok {
					t.Error("a refused clone left a VM")
				}
				return
			}
			e.c.ok("POST", vmPath(tt.src)+"/clone", form)
			v, _ := e.sim.VM(100200)
			want := tt.node
			if want == "" {
				want = node
			}
			if v.Config["scsi0"] != tt.scsi0 || v.Template || v.Lock != "" || v.Node != want {
				t.Errorf("clone %+v, want scsi0 %s", v, tt.scsi0)
			}
			if tt.src == 9100 && v.Name != "proxy-mode" {
				t.Errorf("name %q", v.Name)
			}
		})
	}
}

// A clone without a name is "Copy-of-VM-<source name>" (qemu-server clone_vm).
func TestCloneDefaultName(t *testing.T) {
	e := newEnv(t, nil)
	e.c.ok("POST", vmPath(tmplID)+"/clone", url.Values{"newid": {"100300"}})
	if v, _ := e.sim.VM(100300); v.Name != "Copy-of-VM-debian-13-egressd" {
		t.Errorf("name %q", v.Name)
	}
}

// Injected clone faults: a lock timeout in the task or in the call, a task failing with a
// given exitstatus, an HTTP error; each leaves no VM, and the next clone succeeds. The lock
// timeout text is the one users of parallel clones report (bpg/terraform-provider-proxmox #995,
// #1521).
func TestCloneFaults(t *testing.T) {
	lockMsg := "can't lock file '/var/lock/qemu-server/lock-9001.conf' - got timeout"
	tests := []struct {
		name  string
		fault Fault
		code  int    // synchronous answer; 0: accepted
		msg   string // its text, or the task's exit
	}{
		{"lock timeout in the task", Fault{Kind: FaultLockTimeout}, 0, lockMsg},
		{"lock timeout in the call", Fault{Kind: FaultLockTimeoutSync}, 500, lockMsg},
		{"task failure", Fault{Kind: FaultTaskFailed, Exit: "clone failed: unable to create image: got lock timeout - aborting command"}, 0,
			"clone failed: unable to create image: got lock timeout - aborting command"},
		{"HTTP 503", Fault{Kind: FaultHTTP, Status: 503, Message: "service unavailable"}, 503, "service unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.sim.FailNext(OpClone, node, tt.fault)
			form := cloneReq(100400, "proxy-fault")
			if tt.code != 0 {
				e.c.do("POST", vmPath(tmplID)+"/clone", form).wantError(t, tt.code, tt.msg)
			} else if exit := e.c.wait(e.c.upid("POST", vmPath(tmplID)+"/clone", form)); exit != tt.msg {
				t.Fatalf("task exit %q, want %q", exit, tt.msg)
			}
			if _, ok := e.sim.VM(100400); ok {
				t.Fatal("the failed clone left a VM")
			}
			e.c.ok("POST", vmPath(tmplID)+"/clone", form)
			if n := e.sim.Calls("POST /nodes/{node}/qemu/{vmid}/clone"); n != 2 {
				t.Errorf("clone calls %d, want 2", n)
			}
		})
	}
}

// Concurrency: MaxClonesInFlight counts clones running at once per node and storage; with
// CloneContention 2, a third concurrent clone fails in its task with the lock timeout.
func TestCloneConcurrency(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Timing.Clone = 2 * time.Second
		o.CloneContention = 2
	})
	var wg sync.WaitGroup
	upids := make([]string, 3)
	for i := range upids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			upids[i] = e.c.upid("POST", vmPath(tmplID)+"/clone", cloneReq(100500+i, fmt.Sprintf("proxy-c%d", i)))
		}()
	}
	wg.Wait()
	if n := e.sim.ClonesInFlight(node, "local-lvm"); n != 3 {
		t.Errorf("in flight %d, want 3", n)
	}
	var ok, locked int
	for _, u := range upids {
		switch exit := e.c.wait(u); {
		case exit == ExitOK:
			ok++
		case strings.HasPrefix(exit, "can't lock file '/var/lock/qemu-server/lock-9001.conf'"):
			locked++
		default:
			t.Errorf("exit %q", exit)
		}
	}
	if ok != 2 || locked != 1 {
		t.Errorf("%d OK and %d lock timeouts, want 2 and 1", ok, locked)
	}
	if n := e.sim.MaxClonesInFlight(node, "local-lvm"); n != 3 {
		t.Errorf("max in flight %d, want 3", n)
	}
	if n := e.sim.ClonesInFlight(node, "local-lvm"); n != 0 {
		t.Errorf("in flight after all ended %d", n)
	}
	if n := len(e.sim.VMs()); n != 3 { // the template and two clones
		t.Errorf("%d VMs, want the template and 2 clones", n)
	}
}

// An abandoned clone (the worker died) leaves the VM locked, nameless and unknown, its task
// "unexpected status"; config writes, destroy and starts wait or fail until Unlock.
func TestAbandonedClone(t *testing.T) {
	e := newEnv(t, nil)
	const id = 100450
	e.sim.FailNext(OpClone, node, Fault{Kind: FaultAbandoned})
	if exit := e.c.wait(e.c.upid("POST", vmPath(tmplID)+"/clone", cloneReq(id, "proxy-stuck"))); exit != "unexpected status" {
		t.Fatalf("exit %q", exit)
	}
	if got := resourceStatus(t, e, id); got != "unknown" {
		t.Errorf("status %q, want unknown", got)
	}
	e.c.do("PUT", vmPath(id)+"/config", url.Values{"cores": {"2"}}).wantError(t, 500, "VM is locked (clone)")
	e.c.do("DELETE", vmPath(id), nil).wantError(t, 500, "VM is locked (clone)")
	start := e.c.upid("POST", vmPath(id)+"/status/start", nil)
	if n := e.sim.ClonesInFlight(node, "local-lvm"); n != 0 {
		t.Errorf("in flight %d after the task ended", n)
	}
	if err := e.sim.Unlock(id); err != nil {
		t.Fatal(err)
	}
	// The queued start goes on with the now empty config; the simulator does not refuse a
	// VM without disks.
	if exit := e.c.wait(start); exit != ExitOK {
		t.Fatalf("queued start after Unlock: %q", exit)
	}
	if err := e.sim.Unlock(id); err == nil {
		t.Error("Unlock of an unlocked VM succeeded")
	}
	v, _ := e.sim.VM(id)
	if v.Name != "" || v.Lock != "" || v.Status != "running" {
		t.Errorf("after Unlock %+v", v)
	}
}

// A lock other than clone (a foreign VM's backup lock, via PutVM) refuses config writes and
// fails queued starts in the task; Unlock clears it.
func TestOtherLock(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.sim.PutVM(node, 100460, map[string]string{"name": "someone-else", "lock": "backup"}); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.PutVM(node, 100460, nil); err == nil {
		t.Error("PutVM onto a taken VMID succeeded")
	}
	e.c.do("PUT", vmPath(100460)+"/config", url.Values{"cores": {"2"}}).wantError(t, 500, "VM is locked (backup)")
	if exit := e.c.wait(e.c.upid("POST", vmPath(100460)+"/status/start", nil)); exit != "VM is locked (backup)" {
		t.Errorf("start exit %q", exit)
	}
	if got := resourceEntry(t, e, 100460)["lock"]; got != "backup" {
		t.Errorf("resources lock %q", got)
	}
	if err := e.sim.Unlock(100460); err != nil {
		t.Fatal(err)
	}
	e.c.data("PUT", vmPath(100460)+"/config", url.Values{"cores": {"2"}}, nil)
	e.c.do("POST", vmPath(tmplID)+"/clone", cloneReq(100460, "proxy-x")).
		wantError(t, 500, "unable to create VM 100460: config file already exists")
}
