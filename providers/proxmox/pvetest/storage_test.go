package pvetest

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"
)

// F12: upload semantics. Sources: F12; pve-storage API2/Storage/Status.pm
// (upload) via the API viewer
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/storage/{storage}/upload).
func TestUploadErrors(t *testing.T) {
	seedStorage := func(o *Options) {
		o.Storages = append(DefaultStorages(), Storage{ID: "proxy-seeds", Type: "dir", Content: []string{"vztmpl"}})
	}
	tests := []struct {
		name     string
		storage  string
		content  string
		filename string
		code     int
		msg      string
		keys     []string
	}{
		{"non-.iso name", "local", "iso", "seed.txt", 400, "Parameter verification failed.", []string{"filename"}},
		{"snippets refused", "local", "snippets", "user-data.yaml", 400, "Parameter verification failed.", []string{"content"}},
		{"no content", "local", "", "seed.iso", 400, "Parameter verification failed.", []string{"content"}},
		{"storage without iso content", "proxy-seeds", "iso", "seed.iso", 500, "storage 'proxy-seeds' does not support 'iso' content", nil},
		{"block storage", "local-lvm", "iso", "seed.iso", 500, "can't upload to storage type 'lvmthin'", nil},
		{"unknown storage", "nope", "iso", "seed.iso", 500, "storage 'nope' does not exist", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, seedStorage)
			r := e.c.send(e.c.uploadRequest(node, tt.storage, tt.content, tt.filename, []byte("x")))
			r.wantError(t, tt.code, tt.msg, tt.keys...)
			if got := e.sim.Volumes(node, tt.storage); len(got) != 0 {
				t.Errorf("volumes %v after a refused upload", got)
			}
		})
	}
}

// F12: re-upload overwrites silently; the name is normalised as PVE does; .img passes too;
// an injected failure stores nothing.
func TestUploadOverwriteAndFaults(t *testing.T) {
	e := newEnv(t, nil)
	if exit := e.c.wait(e.c.upload(node, "local", "proxy-a-seed.iso", []byte("first"))); exit != ExitOK {
		t.Fatal(exit)
	}
	if exit := e.c.wait(e.c.upload(node, "local", "proxy-a-seed.iso", []byte("second"))); exit != ExitOK {
		t.Fatal(exit)
	}
	if b, ok := e.sim.Volume(node, "local:iso/proxy-a-seed.iso"); !ok || !bytes.Equal(b, []byte("second")) {
		t.Errorf("volume %q, %v: want the second upload", b, ok)
	}
	e.c.wait(e.c.upload(node, "local", "we ird name.IMG", []byte("x")))
	e.sim.FailNext(OpUpload, node, Fault{Kind: FaultTaskFailed, Exit: "import failed: cp: cannot create regular file: No space left on device"})
	if exit := e.c.wait(e.c.upload(node, "local", "proxy-b-seed.iso", []byte("x"))); exit != "import failed: cp: cannot create regular file: No space left on device" {
		t.Errorf("exit %q", exit)
	}
	e.sim.FailNext(OpUpload, node, Fault{Kind: FaultHTTP, Status: 500, Message: "upload failed"})
	e.c.send(e.c.uploadRequest(node, "local", "iso", "proxy-c-seed.iso", []byte("x"))).wantError(t, 500, "upload failed")
	got := e.sim.Volumes(node, "local")
	if len(got) != 2 || got[0] != "local:iso/proxy-a-seed.iso" || got[1] != "local:iso/we_ird_name.IMG" {
		t.Errorf("volumes %v", got)
	}
	var list []map[string]any
	e.c.data("GET", "/nodes/"+node+"/storage/local/content", url.Values{"content": {"iso"}}, &list)
	if len(list) != 2 || list[0]["volid"] != "local:iso/proxy-a-seed.iso" || list[0]["size"] != float64(6) {
		t.Errorf("content %v", list)
	}
}

// F13: volume delete is an imgdel task (id the storage); missing volumes end OK; the volume
// may be named with or without its storage; a mismatching storage is refused.
func TestDeleteVolume(t *testing.T) {
	e := newEnv(t, nil)
	e.c.wait(e.c.upload(node, "local", "a.iso", []byte("a")))
	e.c.wait(e.c.upload(node, "local", "b.iso", []byte("b")))
	u := e.c.upid("DELETE", "/nodes/"+node+"/storage/local/content/"+url.PathEscape("local:iso/a.iso"), nil)
	if pu, _ := ParseUPID(u); pu.Type != "imgdel" || pu.ID != "local" {
		t.Errorf("UPID %+v", pu)
	}
	e.c.wait(u)
	e.c.ok("DELETE", "/nodes/"+node+"/storage/local/content/iso/b.iso", nil) // unescaped, no storage prefix
	e.c.ok("DELETE", "/nodes/"+node+"/storage/local/content/"+url.PathEscape("local:iso/never.iso"), nil)
	if got := e.sim.Volumes(node, "local"); len(got) != 0 {
		t.Errorf("volumes %v", got)
	}
	e.c.do("DELETE", "/nodes/"+node+"/storage/local/content/"+url.PathEscape("other:iso/a.iso"), nil).
		wantError(t, 500, "storage ID mismatch (other != local)")
	e.sim.FailNext(OpDeleteVolume, node, Fault{Kind: FaultTaskFailed, Exit: "unlink failed"})
	if exit := e.c.wait(e.c.upid("DELETE", "/nodes/"+node+"/storage/local/content/local:iso/x.iso", nil)); exit != "unlink failed" {
		t.Errorf("exit %q", exit)
	}
}

// Storage status: the checker's isoStorage and avail (docs/providers/proxmox.md, Checks); unknown: 400.
func TestStorageStatus(t *testing.T) {
	e := newEnv(t, nil)
	e.c.wait(e.c.upload(node, "local", "a.iso", make([]byte, 1000)))
	var st map[string]any
	e.c.data("GET", "/nodes/"+node+"/storage/local/status", nil, &st)
	if st["content"] != "backup,import,iso,vztmpl" || st["type"] != "dir" || st["active"] != float64(1) ||
		st["total"] != float64(100<<30) || st["used"] != float64(1000) || st["avail"] != float64(100<<30-1000) {
		b, _ := json.Marshal(st)
		t.Errorf("status %s", b)
	}
	e.c.do("GET", "/nodes/"+node+"/storage/nope/status", nil).wantError(t, 400, "Parameter verification failed.", "storage")
}

// F13 without Datastore.Allocate: the 403 a provider must classify Permanent, injected.
func TestPermissionDenied(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.FailNext(OpDeleteVolume, node, PermissionDenied("/storage/local", "Datastore.Allocate"))
	e.c.do("DELETE", "/nodes/"+node+"/storage/local/content/local:iso/a.iso", nil).
		wantError(t, 403, "Permission check failed (/storage/local, Datastore.Allocate)")
}
