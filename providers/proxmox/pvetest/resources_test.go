package pvetest

import (
	"net/url"
	"testing"
)

// F8: cluster/resources fields; lock and tags only when set; type filter. Sources: F8 (docs/providers/proxmox.md); https://pve.proxmox.com/pve-docs/api-viewer/#/cluster/resources.
func TestClusterResources(t *testing.T) {
	e := newEnv(t, nil)
	e.cloned(t, 101500, "proxy-res")
	e.c.data("PUT", vmPath(101500)+"/config", url.Values{"tags": {"proxy_operator"}, "cores": {"2"}, "memory": {"2048"}}, nil)
	var res []map[string]any
	e.c.data("GET", "/cluster/resources", url.Values{"type": {"vm"}}, &res)
	if len(res) != 2 {
		t.Fatalf("%d entries, want the template and the clone: %v", len(res), res)
	}
	tmpl, vm := res[0], res[1] // by VMID
	for _, k := range []string{"id", "type", "vmid", "name", "node", "status", "template", "maxcpu", "maxmem", "mem", "maxdisk", "disk", "cpu", "uptime"} {
		if _, ok := vm[k]; !ok {
			t.Errorf("field %s missing from %v", k, vm)
		}
	}
	if _, ok := tmpl["tags"]; ok {
		t.Errorf("tags on an untagged entry: %v", tmpl)
	}
	if _, ok := vm["lock"]; ok {
		t.Errorf("lock on an unlocked entry: %v", vm)
	}
	if tmpl["template"] != float64(1) || vm["template"] != float64(0) || vm["tags"] != "proxy_operator" ||
		vm["maxcpu"] != float64(2) || vm["maxmem"] != float64(2048<<20) || vm["maxdisk"] != float64(3<<30) ||
		vm["status"] != "stopped" || vm["id"] != "qemu/101500" {
		t.Errorf("entries %v / %v", tmpl, vm)
	}
	for typ, want := range map[string]int{"node": 1, "storage": 2, "": 5} {
		var out []map[string]any
		e.c.data("GET", "/cluster/resources", url.Values{"type": {typ}}, &out)
		if len(out) != want {
			t.Errorf("type %q: %d entries, want %d", typ, len(out), want)
		}
	}
	e.c.do("GET", "/cluster/resources", url.Values{"type": {"qemu"}}).wantError(t, 400, "Parameter verification failed.", "type")
}

// /cluster/nextid answers the lowest free VMID as a string and reserves nothing.
func TestNextID(t *testing.T) {
	e := newEnv(t, nil)
	var id string
	e.c.data("GET", "/cluster/nextid", nil, &id)
	if id != "100" {
		t.Errorf("nextid %q", id)
	}
	e.c.data("GET", "/cluster/nextid", nil, &id)
	if id != "100" {
		t.Errorf("nextid reserved: %q", id)
	}
	e.c.do("GET", "/cluster/nextid", url.Values{"vmid": {"9001"}}).wantError(t, 400, "Parameter verification failed.", "vmid")
}

// The checker's calls (docs/providers/proxmox.md, Checks): version, node status.
func TestVersionAndNodeStatus(t *testing.T) {
	e := newEnv(t, nil)
	var v map[string]any
	e.c.data("GET", "/version", nil, &v)
	if v["version"] != "9.2.20" || v["release"] != "9.2" {
		t.Errorf("version %v", v)
	}
	var n map[string]any
	e.c.data("GET", "/nodes/"+node+"/status", nil, &n)
	if n["kversion"] == nil || n["pveversion"] != "pve-manager/9.2.20/3f1c0d2e9a7b5c41" {
		t.Errorf("node status %v", n)
	}
}
