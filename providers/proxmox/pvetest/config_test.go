package pvetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// PUT config (synchronous, null): F9 tags, F19 boot order, value and key checks, digest,
// delete. Sources: F9, F19; the API viewer
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/qemu/{vmid}/config).
func TestPutConfig(t *testing.T) {
	tests := []struct {
		name string
		form url.Values
		want map[string]string // keys after the PUT; "" absent
		keys []string          // 400 naming these keys
	}{
		{name: "F9 hyphenated tag", form: url.Values{"tags": {"proxy-operator"}}, want: map[string]string{"tags": "proxy-operator"}},
		{name: "F9 uppercase folded, ';' separates", form: url.Values{"tags": {"Proxy_Operator;Blue"}}, want: map[string]string{"tags": "blue;proxy_operator"}},
		{name: "F9 space is invalid", form: url.Values{"tags": {"proxy operator"}}, keys: []string{"tags"}},
		{name: "F9 bang is invalid", form: url.Values{"tags": {"proxy!"}}, keys: []string{"tags"}},
		{name: "F19 ide2 appended to boot order", form: url.Values{"ide2": {"local:iso/s.iso,media=cdrom"}},
			want: map[string]string{"boot": "order=scsi0;ide2", "ide2": "local:iso/s.iso,media=cdrom"}},
		{name: "explicit boot wins", form: url.Values{"ide2": {"local:iso/s.iso,media=cdrom"}, "boot": {"order=scsi0"}},
			want: map[string]string{"boot": "order=scsi0"}},
		{name: "net0 tag and bridge", form: url.Values{"net0": {"virtio=BC:24:11:AA:BB:CC,bridge=vmbr1,tag=4"}},
			want: map[string]string{"net0": "virtio=BC:24:11:AA:BB:CC,bridge=vmbr1,tag=4"}},
		{name: "net0 model form", form: url.Values{"net0": {"model=virtio,macaddr=bc:24:11:aa:bb:cc,bridge=vmbr0,firewall=1"}},
			want: map[string]string{"net0": "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,firewall=1"}},
		{name: "net0 VLAN out of range", form: url.Values{"net0": {"virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=4095"}}, keys: []string{"net0"}},
		{name: "cores memory agent", form: url.Values{"cores": {"4"}, "memory": {"4096"}, "agent": {"enabled=1,fstrim_cloned_disks=1"}},
			want: map[string]string{"cores": "4", "memory": "4096", "agent": "enabled=1,fstrim_cloned_disks=1"}},
		{name: "delete keys", form: url.Values{"delete": {"agent,serial0"}}, want: map[string]string{"agent": "", "serial0": ""}},
		{name: "description multi-line", form: url.Values{"description": {"a\r\nb\n"}}, want: map[string]string{"description": "a\r\nb\n"}},
		{name: "unknown key", form: url.Values{"colour": {"red"}}, keys: []string{"colour"}},
		{name: "bad values named", form: url.Values{"cores": {"0"}, "memory": {"lots"}, "boot": {"order=floppy0"}, "ide2": {"nonsense"}},
			keys: []string{"cores", "memory", "boot", "ide2"}},
		{name: "no such device", form: url.Values{"ide7": {"local:iso/s.iso,media=cdrom"}}, keys: []string{"ide7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.cloned(t, 101100, "proxy-conf")
			if tt.keys != nil {
				e.c.do("PUT", vmPath(101100)+"/config", tt.form).wantError(t, 400, "Parameter verification failed.", tt.keys...)
				return
			}
			r := e.c.do("PUT", vmPath(101100)+"/config", tt.form)
			if r.resp.StatusCode != 200 || string(r.body) != `{"data":null}` {
				t.Fatalf("%s %s, want 200 {\"data\":null}", r.resp.Status, r.body)
			}
			v, _ := e.sim.VM(101100)
			for k, want := range tt.want {
				if got := v.Config[k]; got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// A stale digest is refused; the current one passes; OpConfig faults answer synchronously.
func TestConfigDigestAndFaults(t *testing.T) {
	e := newEnv(t, nil)
	e.cloned(t, 101200, "proxy-digest")
	var conf map[string]any
	e.c.data("GET", vmPath(101200)+"/config", nil, &conf)
	digest := conf["digest"].(string)
	e.c.data("PUT", vmPath(101200)+"/config", url.Values{"cores": {"2"}, "digest": {digest}}, nil)
	e.c.do("PUT", vmPath(101200)+"/config", url.Values{"cores": {"3"}, "digest": {digest}}).
		wantError(t, 500, "detected modified configuration - file changed by other user? Try again.")
	e.sim.FailNext(OpConfig, node, Fault{Kind: FaultLockTimeout})
	e.c.do("PUT", vmPath(101200)+"/config", url.Values{"cores": {"3"}}).
		wantError(t, 500, "can't lock file '/var/lock/qemu-server/lock-101200.conf' - got timeout")
	e.c.data("PUT", vmPath(101200)+"/config", url.Values{"cores": {"3"}}, nil)
}

// F2 on every VM endpoint (F2: config, status/current, DELETE; the others the
// same load_config in qemu-server).
func TestMissingVM(t *testing.T) {
	e := newEnv(t, nil)
	msg := "Configuration file 'nodes/pv1-1/qemu-server/999999.conf' does not exist"
	for _, call := range []struct{ method, path string }{
		{"GET", "/config"}, {"PUT", "/config"}, {"GET", "/status/current"}, {"POST", "/status/start"},
		{"POST", "/status/stop"}, {"GET", "/agent/network-get-interfaces"}, {"DELETE", ""},
		{"POST", "/clone"}, {"PUT", "/resize"},
	} {
		t.Run(call.method+call.path, func(t *testing.T) {
			form := url.Values{}
			switch call.path {
			case "/clone":
				form.Set("newid", "100")
			case "/resize":
				form = url.Values{"disk": {"scsi0"}, "size": {"4G"}}
			case "/config":
				if call.method == "PUT" {
					form.Set("cores", "2")
				}
			}
			e.c.do(call.method, vmPath(999999)+call.path, form).wantError(t, 500, msg)
		})
	}
	// A VM on another node is missing on this one.
	e2 := newEnv(t, func(o *Options) { o.Nodes = []string{node, "pv1-2"} })
	e2.c.do("GET", fmt.Sprintf("/nodes/pv1-2/qemu/%d/config", tmplID), nil).
		wantError(t, 500, "Configuration file 'nodes/pv1-2/qemu-server/9001.conf' does not exist")
}

// F20: resize runs as a task; grow by +N or to N; same size OK; shrink, cdrom and a missing
// disk fail in the task.
func TestResize(t *testing.T) {
	tests := []struct {
		disk, size string
		exit       string
		scsi0      string
	}{
		{"scsi0", "+1G", ExitOK, "local-lvm:base-9001-disk-0/vm-101300-disk-0,size=4G"},
		{"scsi0", "8G", ExitOK, "local-lvm:base-9001-disk-0/vm-101300-disk-0,size=8G"},
		{"scsi0", "3G", ExitOK, "local-lvm:base-9001-disk-0/vm-101300-disk-0,size=3G"},
		{"scsi0", "3072M", ExitOK, "local-lvm:base-9001-disk-0/vm-101300-disk-0,size=3G"},
		{"scsi0", "2G", "shrinking disks is not supported", "local-lvm:base-9001-disk-0/vm-101300-disk-0,size=3G"},
		{"ide2", "1G", "you can't resize a cdrom", ""},
		{"virtio0", "1G", "disk 'virtio0' does not exist", ""},
	}
	for _, tt := range tests {
		t.Run(tt.disk+tt.size, func(t *testing.T) {
			e := newEnv(t, nil)
			e.cloned(t, 101300, "proxy-resize")
			e.c.data("PUT", vmPath(101300)+"/config", url.Values{"ide2": {"local:iso/s.iso,media=cdrom"}}, nil)
			u := e.c.upid("PUT", vmPath(101300)+"/resize", url.Values{"disk": {tt.disk}, "size": {tt.size}})
			if pu, _ := ParseUPID(u); pu.Type != "resize" || pu.ID != "101300" {
				t.Errorf("UPID %+v", pu)
			}
			if exit := e.c.wait(u); exit != tt.exit {
				t.Fatalf("exit %q, want %q", exit, tt.exit)
			}
			if v, _ := e.sim.VM(101300); tt.scsi0 != "" && v.Config["scsi0"] != tt.scsi0 {
				t.Errorf("scsi0 %q, want %q", v.Config["scsi0"], tt.scsi0)
			}
		})
	}
	e := newEnv(t, nil)
	e.cloned(t, 101300, "proxy-resize")
	e.c.do("PUT", vmPath(101300)+"/resize", url.Values{"disk": {"scsi0"}, "size": {"-1G"}}).
		wantError(t, 400, "Parameter verification failed.", "size")
}

// Destroy: a qmdestroy task; running refused; the seed ISO stays; faults.
func TestDestroy(t *testing.T) {
	e := newEnv(t, nil)
	e.booted(t, 101400, "proxy-del", "")
	e.c.do("DELETE", vmPath(101400), url.Values{"purge": {"1"}}).wantError(t, 500, "VM 101400 is running - destroy failed")
	e.c.ok("POST", vmPath(101400)+"/status/stop", nil)
	e.sim.FailNext(OpDestroy, node, Fault{Kind: FaultTaskFailed, Exit: "error with cfs lock 'storage-local-lvm': got lock request timeout"})
	if exit := e.c.wait(e.c.upid("DELETE", vmPath(101400), nil)); exit != "error with cfs lock 'storage-local-lvm': got lock request timeout" {
		t.Fatalf("exit %q", exit)
	}
	if _, ok := e.sim.VM(101400); !ok {
		t.Fatal("a failed destroy removed the VM")
	}
	u := e.c.upid("DELETE", vmPath(101400), url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}})
	if pu, _ := ParseUPID(u); pu.Type != "qmdestroy" || pu.ID != "101400" {
		t.Errorf("UPID %+v", pu)
	}
	if exit := e.c.wait(u); exit != ExitOK {
		t.Fatal(exit)
	}
	if _, ok := e.sim.VM(101400); ok {
		t.Error("VM still there")
	}
	if got := e.sim.Volumes(node, "local"); len(got) != 1 {
		t.Errorf("volumes %v: the seed ISO is not the VM's and stays", got)
	}
	e.c.do("DELETE", vmPath(tmplID), url.Values{"purge": {"yes please"}}).wantError(t, 400, "Parameter verification failed.", "purge")
}

// pve-http-server also takes JSON bodies (numbers and booleans as their PVE forms).
func TestJSONBody(t *testing.T) {
	e := newEnv(t, nil)
	req, _ := http.NewRequest("POST", e.c.base+vmPath(tmplID)+"/clone",
		strings.NewReader(`{"newid": 101900, "name": "proxy-json", "full": true}`))
	req.Header.Set("Content-Type", "application/json")
	r := e.c.send(req)
	if r.resp.StatusCode != 200 {
		t.Fatalf("%s %s", r.resp.Status, r.body)
	}
	var env struct{ Data string }
	json.Unmarshal(r.body, &env)
	if exit := e.c.wait(env.Data); exit != ExitOK {
		t.Fatal(exit)
	}
	if v, _ := e.sim.VM(101900); v.Config["scsi0"] != "local-lvm:vm-101900-disk-0,size=3G" {
		t.Errorf("full clone from JSON: %v", v.Config["scsi0"])
	}
	req, _ = http.NewRequest("PUT", e.c.base+vmPath(101900)+"/config", strings.NewReader(`{"cores": [2]}`))
	req.Header.Set("Content-Type", "application/json")
	e.c.send(req).wantError(t, 400, "Parameter verification failed.", "cores")
}
