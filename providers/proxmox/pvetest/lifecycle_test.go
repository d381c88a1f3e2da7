package pvetest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// The provider's whole path (docs/providers/proxmox.md, "What each call does") against the simulator with a
// plain client: clone → task → upload seed → config → resize → start → status/current →
// agent address → a working forward proxy honouring the seed's port and credential → stop →
// destroy → seed delete.
func TestLifecycle(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the site")
	}))
	defer site.Close()
	e := newEnv(t, nil)
	c := e.c
	const id, name = 100042, "proxy-7hjzuf3d3w2mjnye"

	// Clone answers a UPID naming the node, qmclone and the source VMID (the API viewer).
	upid := c.upid("POST", vmPath(tmplID)+"/clone", cloneReq(id, name, "full", "0"))
	u, _ := ParseUPID(upid)
	if u.Node != node || u.Type != "qmclone" || u.ID != "9001" || u.User != "egressd@pve!prov" {
		t.Errorf("clone UPID %+v", u)
	}
	if exit := c.wait(upid); exit != ExitOK {
		t.Fatalf("clone task: %q", exit)
	}
	var st taskStatus
	c.data("GET", "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil, &st)
	if st.UPID != upid || st.Type != "qmclone" || st.ID != "9001" || st.User != "egressd@pve" ||
		st.TokenID != "prov" || st.Node != node || st.StartTime == 0 || st.PID == 0 {
		t.Errorf("task status %+v (F16)", st)
	}

	var conf map[string]any
	c.data("GET", vmPath(id)+"/config", nil, &conf)
	tv, _ := e.sim.VM(tmplID)
	tmpl := tv.Config
	switch {
	case conf["name"] != name:
		t.Errorf("name %v", conf["name"])
	case conf["description"] != "proxy-operator-managed=true\nproxy-operator-uid="+name+"\n":
		t.Errorf("description %q, want it verbatim (F10)", conf["description"])
	case conf["meta"] != tmpl["meta"]:
		t.Errorf("meta %v, want the template's (F11)", conf["meta"])
	case conf["template"] != nil || conf["lock"] != nil:
		t.Errorf("template %v lock %v after the clone", conf["template"], conf["lock"])
	case conf["scsi0"] != "local-lvm:base-9001-disk-0/vm-100042-disk-0,size=3G":
		t.Errorf("linked scsi0 %v", conf["scsi0"])
	case conf["boot"] != "order=scsi0" || conf["agent"] != "1":
		t.Errorf("boot %v agent %v (F19)", conf["boot"], conf["agent"])
	case conf["net0"] == tmpl["net0"] || !strings.HasSuffix(conf["net0"].(string), ",bridge=vmbr0"):
		t.Errorf("net0 %v, want a new MAC on vmbr0 (template %s)", conf["net0"], tmpl["net0"])
	case conf["digest"] == nil:
		t.Error("no digest")
	}

	auth := authLine(t, "crawler", "s3cret")
	iso := buildSeed(t, seedFiles{name: name, port: proxyPort, auth: auth})
	up := c.upload(node, "local", name+"-seed.iso", iso)
	if pu, _ := ParseUPID(up); pu.Type != "imgcopy" || pu.ID != "" {
		t.Errorf("upload UPID %+v (F12)", pu)
	}
	if exit := c.wait(up); exit != ExitOK {
		t.Fatalf("upload: %s", exit)
	}
	if got := e.sim.Volumes(node, "local"); len(got) != 1 || got[0] != "local:iso/"+name+"-seed.iso" {
		t.Fatalf("volumes %v", got)
	}

	mac := strings.TrimPrefix(strings.Split(conf["net0"].(string), ",")[0], "virtio=")
	c.data("PUT", vmPath(id)+"/config", url.Values{
		"cores": {"2"}, "memory": {"2048"}, "agent": {"1"}, "tags": {"proxy_operator"},
		"ide2": {"local:iso/" + name + "-seed.iso,media=cdrom"},
		"net0": {"virtio=" + mac + ",bridge=vmbr0,tag=4"},
	}, nil)
	c.data("GET", vmPath(id)+"/config", nil, &conf)
	if conf["boot"] != "order=scsi0;ide2" || conf["cores"] != float64(2) || conf["tags"] != "proxy_operator" ||
		conf["net0"] != "virtio="+mac+",bridge=vmbr0,tag=4" {
		t.Errorf("config after PUT: %v", conf)
	}
	c.ok("PUT", vmPath(id)+"/resize", url.Values{"disk": {"scsi0"}, "size": {"4G"}})
	c.data("GET", vmPath(id)+"/config", nil, &conf)
	if conf["scsi0"] != "local-lvm:base-9001-disk-0/vm-100042-disk-0,size=4G" {
		t.Errorf("scsi0 after resize %v", conf["scsi0"])
	}

	c.ok("POST", vmPath(id)+"/status/start", nil)
	var cur map[string]any
	c.data("GET", vmPath(id)+"/status/current", nil, &cur)
	if cur["status"] != "running" || cur["qmpstatus"] != "running" || cur["agent"] != float64(1) || cur["name"] != name {
		t.Errorf("status/current %v", cur)
	}
	ip := c.agentAddr(id)
	proxy := netip.AddrPortFrom(ip, proxyPort)
	code, body, err := fetchThrough(t, proxy, site.URL, "crawler", "s3cret")
	if err != nil || code != 200 || body != "hello from the site" {
		t.Fatalf("through the VM's proxy: %d %q %v", code, body, err)
	}
	if code, _, _ := fetchThrough(t, proxy, site.URL, "crawler", "wrong"); code != http.StatusProxyAuthRequired {
		t.Errorf("wrong password: %d, want 407: the seed's credential is not enforced", code)
	}

	c.ok("POST", vmPath(id)+"/status/stop", nil)
	c.do("GET", vmPath(id)+"/agent/network-get-interfaces", nil).wantError(t, 500, "VM 100042 is not running")
	if !refused(proxy) {
		t.Error("the proxy still listens after stop")
	}
	c.ok("DELETE", vmPath(id), url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}})
	c.do("GET", vmPath(id)+"/config", nil).wantError(t, 500, "Configuration file 'nodes/pv1-1/qemu-server/100042.conf' does not exist")
	vol := url.PathEscape("local:iso/" + name + "-seed.iso")
	del := c.upid("DELETE", "/nodes/"+node+"/storage/local/content/"+vol, nil)
	if du, _ := ParseUPID(del); du.Type != "imgdel" {
		t.Errorf("volume delete UPID %+v (F13)", du)
	}
	if exit := c.wait(del); exit != ExitOK {
		t.Fatalf("imgdel: %s", exit)
	}
	if got := e.sim.Volumes(node, "local"); len(got) != 0 {
		t.Errorf("volumes after delete %v", got)
	}
	c.ok("DELETE", "/nodes/"+node+"/storage/local/content/"+vol, nil) // F13: missing is OK
}
