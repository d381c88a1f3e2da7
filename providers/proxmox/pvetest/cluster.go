package pvetest

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// version: GET /version (https://pve.proxmox.com/pve-docs/api-viewer/#/version).
func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	release := s.opts.Version
	if i := strings.LastIndexByte(release, '.'); i > 0 {
		release = release[:i]
	}
	writeData(w, map[string]any{"version": s.opts.Version, "release": release, "repoid": "3f1c0d2e9a7b5c41"})
}

// nodeStatus: GET /nodes/{node}/status (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/status).
func (s *Server) nodeStatus(w http.ResponseWriter, r *http.Request) {
	const kernel = "6.17.2-1-pve"
	writeData(w, map[string]any{
		"kversion":       "Linux " + kernel + " #1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2026-10-20T09:12Z)",
		"current-kernel": map[string]any{"sysname": "Linux", "release": kernel, "machine": "x86_64", "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2026-10-20T09:12Z)"},
		"pveversion":     "pve-manager/" + s.opts.Version + "/3f1c0d2e9a7b5c41",
		"uptime":         86400,
		"cpu":            0.02,
		"cpuinfo":        map[string]any{"cpus": 8, "cores": 4, "sockets": 1, "model": "pvetest vCPU", "mhz": "2400.000"},
		"memory":         map[string]any{"total": int64(32) << 30, "used": int64(4) << 30, "free": int64(28) << 30},
		"rootfs":         map[string]any{"total": int64(100) << 30, "used": int64(10) << 30, "avail": int64(90) << 30, "free": int64(90) << 30},
		"loadavg":        []string{"0.10", "0.08", "0.05"},
	})
}

// nextID: GET /cluster/nextid (https://pve.proxmox.com/pve-docs/api-viewer/#/cluster/nextid):
// the lowest free VMID from 100 (or ?vmid=N: N if free), as a string; it reserves nothing,
// so concurrent callers race (the API viewer).
func (s *Server) nextID(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := r.URL.Query().Get("vmid"); q != "" {
		n, e := intParam(map[string]string{"vmid": q}, "vmid", 100, 999999999)
		if e != nil {
			writeError(w, e)
			return
		}
		if _, taken := s.vms[int(n)]; taken {
			writeError(w, param("vmid", "VM "+q+" already exists"))
			return
		}
		writeData(w, q)
		return
	}
	for id := 100; ; id++ {
		if _, taken := s.vms[id]; !taken {
			writeData(w, strconv.Itoa(id))
			return
		}
	}
}

// clusterResources: GET /cluster/resources[?type=vm|node|storage]
// (https://pve.proxmox.com/pve-docs/api-viewer/#/cluster/resources; F8): VMs with lock and
// tags only when set, status unknown and no name mid-clone, paused as plain running (F14);
// a down node is offline and its VMs unknown.
func (s *Server) clusterResources(w http.ResponseWriter, r *http.Request) {
	typ := r.URL.Query().Get("type")
	switch typ {
	case "", "vm", "node", "storage", "sdn", "pool":
	default:
		writeError(w, param("type", "value '"+typ+"' does not have a value in the enumeration 'vm, storage, node, sdn, pool'"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	if typ == "" || typ == "vm" {
		for _, id := range slices.Sorted(maps.Keys(s.vms)) {
			out = append(out, s.resource(s.vms[id]))
		}
	}
	if typ == "" || typ == "node" {
		for _, n := range s.opts.Nodes {
			e := map[string]any{"id": "node/" + n, "type": "node", "node": n, "status": "online",
				"maxcpu": 8, "maxmem": int64(32) << 30, "mem": int64(4) << 30, "cpu": 0.02,
				"maxdisk": int64(100) << 30, "disk": int64(10) << 30, "uptime": 86400, "level": ""}
			if _, down := s.down[n]; down {
				e = map[string]any{"id": "node/" + n, "type": "node", "node": n, "status": "offline"}
			}
			out = append(out, e)
		}
	}
	if typ == "" || typ == "storage" {
		for _, n := range s.opts.Nodes {
			for _, def := range s.opts.Storages {
				st := s.storages[n+"/"+def.ID]
				total := int64(def.TotalGiB) << 30
				if def.TotalGiB <= 0 {
					total = 100 << 30
				}
				status := "available"
				if _, down := s.down[n]; down {
					status = "unknown"
				}
				out = append(out, map[string]any{"id": "storage/" + n + "/" + def.ID, "type": "storage",
					"storage": def.ID, "node": n, "status": status, "plugintype": def.Type,
					"content": strings.Join(slices.Sorted(maps.Keys(st.content)), ","),
					"shared":  boolInt(def.Shared), "maxdisk": total, "disk": st.used()})
			}
		}
	}
	writeData(w, out)
}

// resource is v's cluster/resources entry. Callers hold s.mu.
func (s *Server) resource(v *vm) map[string]any {
	e := map[string]any{"id": "qemu/" + strconv.Itoa(v.vmid), "type": "qemu", "vmid": v.vmid,
		"node": v.node, "status": v.status(), "template": boolInt(v.template()),
		"maxcpu": v.cores(), "maxmem": v.memoryBytes(), "mem": 0, "cpu": 0, "maxdisk": int64(0),
		"disk": 0, "uptime": 0, "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0}
	if _, down := s.down[v.node]; down {
		e["status"] = "unknown"
	}
	if v.cloning {
		// F8: qmclone's temporary config holds only the lock.
		e["maxcpu"], e["maxmem"] = 1, int64(512)<<20
		e["lock"] = "clone"
		return e
	}
	if n := v.name(); n != "" {
		e["name"] = n
	}
	if _, d, ok := v.bootDisk(); ok {
		e["maxdisk"] = d.Size
	}
	if l := v.locked(); l != "" {
		e["lock"] = l
	}
	if t := v.conf["tags"]; t != "" {
		e["tags"] = t
	}
	if v.running {
		e["uptime"] = int64(s.now().Sub(v.startedAt).Seconds())
		e["mem"] = v.memoryBytes() / 4
	}
	return e
}
