package pvetest

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// dnsNameRE is PVE's dns-name format (the clone's and config's name).
var dnsNameRE = regexp.MustCompile(`^(?i:[a-z0-9]([a-z0-9-]*[a-z0-9])?)(\.(?i:[a-z0-9]([a-z0-9-]*[a-z0-9])?))*$`)

// clone: POST /nodes/{node}/qemu/{vmid}/clone
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/qemu/{vmid}/clone).
// Synchronous checks as qemu-server's load_and_check (F4, F15), then a qmclone task whose id is
// the source VMID; the new VM holds lock clone (F7, F8) for Timing.Clone.
func (s *Server) clone(w http.ResponseWriter, r *http.Request) {
	c, ok := readVMCall(w, r, checkCloneParams, []string{"newid"}, "name", "description", "full", "target",
		"storage", "pool", "snapname", "format", "bwlimit")
	if !ok {
		return
	}
	node, src, params := c.node, c.vmid, c.params
	newid, _ := strconv.Atoi(params["newid"])
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.checkClone(node, src, newid, params); e != nil {
		writeError(w, e)
		return
	}
	fault, hasFault := s.nextFault(OpClone, node)
	if hasFault && fault.sync() {
		writeError(w, fault.syncError(src))
		return
	}
	source := s.vms[src]
	full, _ := boolParam(params, "full", !source.template())
	target := params["target"]
	if target == "" {
		target = node
	}
	storage := params["storage"]
	if storage == "" {
		_, d, _ := source.bootDisk()
		storage = d.storage()
	}
	key := target + "/" + storage
	contended := s.opts.CloneContention > 0 && s.cloning[key] >= s.opts.CloneContention
	s.cloning[key]++
	s.maxCloning[key] = max(s.maxCloning[key], s.cloning[key])

	nv := &vm{vmid: newid, node: target, cloning: true, unlocked: make(chan struct{}),
		conf: map[string]string{"lock": "clone"}}
	s.vms[nv.vmid] = nv
	conf := s.clonedConfig(source, nv.vmid, full, params)
	t := s.newTask(r, node, "qmclone", strconv.Itoa(src))
	s.spawn(t, s.timing.Clone, func() (string, func()) {
		s.cloning[key]--
		exit := ExitOK
		switch {
		case contended:
			exit = fmt.Sprintf(msgLockTimeout, src)
		case hasFault && fault.Kind == FaultAbandoned:
			nv.abandoned = true
			return exitUnexpected, nil
		case hasFault:
			exit = fault.taskExit(src)
		}
		if exit != ExitOK {
			// qmclone removes what it made, the config last (API2/Qemu.pm clone_vm).
			delete(s.vms, nv.vmid)
		} else {
			nv.conf, nv.cloning = conf, false
		}
		close(nv.unlocked)
		return exit, nil
	})
	writeData(w, t.upid.String())
}

func checkCloneParams(params map[string]string) *apiError {
	if _, e := intParam(params, "newid", 100, 999999999); e != nil {
		return e
	}
	if params["name"] != "" && !dnsNameRE.MatchString(params["name"]) {
		return param("name", "invalid format - value does not look like a valid DNS name")
	}
	_, e := boolParam(params, "full", false)
	return e
}

// checkClone is load_and_check's synchronous part. Callers hold s.mu.
func (s *Server) checkClone(node string, src, newid int, params map[string]string) *apiError {
	source, e := s.lookupVM(node, src)
	if e != nil {
		return e
	}
	if l := source.locked(); l != "" {
		return errorf(500, msgLocked, l)
	}
	if source.cloning {
		return errorf(500, msgLocked, "clone")
	}
	full, _ := boolParam(params, "full", !source.template())
	if st := params["storage"]; st != "" {
		sto := s.storages[node+"/"+st]
		switch {
		case sto == nil:
			return errorf(500, "storage '%s' does not exist", st)
		case !sto.content["images"]:
			// F15: rejected up front, no VM left.
			return param("storage", fmt.Sprintf("storage '%s' does not support vm images", st))
		case !full:
			return errorf(500, "parameter 'storage' not allowed for linked clones")
		}
	}
	if tg := params["target"]; tg != "" && tg != node {
		if !s.knownNode(tg) {
			return errorf(500, "no such cluster node '%s'", tg)
		}
		if !s.sharedDisks(source, params["storage"]) {
			return errorf(500, "can't clone VM to node '%s' (VM uses local storage)", tg)
		}
	}
	if !full && !source.template() {
		key, d, _ := source.bootDisk()
		return errorf(500, "Linked clone feature is not supported for '%s' (%s)", d.Volume, key)
	}
	if _, taken := s.vms[newid]; taken {
		return errorf(500, msgConfigExists, newid) // F4
	}
	return nil
}

// sharedDisks reports whether every disk of v is, or is cloned onto (target storage, when
// given), shared storage, as check_storage_access_clone decides. Callers hold s.mu.
func (s *Server) sharedDisks(v *vm, target string) bool {
	for k, val := range v.conf {
		if !deviceRE.MatchString(k) || strings.HasPrefix(k, "net") {
			continue
		}
		d, err := parseDrive(val)
		if err != nil || d.Media == "cdrom" {
			continue
		}
		sid := d.storage()
		if target != "" {
			sid = target
		}
		if st := s.storages[v.node+"/"+sid]; st == nil || !st.def.Shared {
			return false
		}
	}
	return true
}

// clonedConfig is the new VM's config as qmclone writes it: everything copied but template,
// snapshots and unused disks; every NIC a new MAC; disks linked (base-S-disk-N/vm-V-disk-N)
// or fully copied (vm-V-disk-N, onto the storage parameter when given); new smbios1 uuid
// and vmgenid; name from the parameter or "Copy-of-VM-<name>"; description when given;
// meta (ctime) copied from the source (F11).
func (s *Server) clonedConfig(src *vm, newid int, full bool, params map[string]string) map[string]string {
	conf := map[string]string{}
	for k, v := range src.conf {
		switch {
		case k == "template" || k == "lock" || k == "parent" || k == "snaptime" || k == "vmstate" ||
			strings.HasPrefix(k, "unused"):
			continue
		case strings.HasPrefix(k, "net") && deviceRE.MatchString(k):
			if n, err := parseNet(v); err == nil {
				n.MAC = randomMAC()
				v = n.String()
			}
		case deviceRE.MatchString(k):
			if d, err := parseDrive(v); err == nil && d.Media != "cdrom" {
				_, vol, _ := strings.Cut(d.Volume, ":")
				base := vol[strings.LastIndexByte(vol, '/')+1:]
				disk := fmt.Sprintf("vm-%d-%s", newid, diskSuffix(base))
				st := d.storage()
				if full {
					if params["storage"] != "" {
						st = params["storage"]
					}
					d.Volume = st + ":" + disk
				} else {
					d.Volume = st + ":" + vol + "/" + disk
				}
				d.p.set("file", d.Volume)
				v = d.String()
			}
		}
		conf[k] = v
	}
	conf["smbios1"] = "uuid=" + uuid()
	if _, ok := conf["vmgenid"]; ok {
		conf["vmgenid"] = uuid()
	}
	if n := params["name"]; n != "" {
		conf["name"] = n
	} else {
		old := src.name()
		if old == "" {
			old = strconv.Itoa(src.vmid)
		}
		conf["name"] = "Copy-of-VM-" + old
	}
	if d := params["description"]; d != "" {
		conf["description"] = d // F10: verbatim, newlines included
	}
	return conf
}

// diskSuffix is the "disk-N" of a volume name like base-9001-disk-0.
func diskSuffix(vol string) string {
	if i := strings.Index(vol, "disk-"); i >= 0 {
		return vol[i:]
	}
	return "disk-0"
}

// ClonesInFlight is how many clone tasks run now on node onto storage (the source disk's
// storage unless the call named one): the figure issue 12's "never more than 2" counts.
func (s *Server) ClonesInFlight(node, storage string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cloning[node+"/"+storage]
}

// MaxClonesInFlight is ClonesInFlight's highest value since New.
func (s *Server) MaxClonesInFlight(node, storage string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxCloning[node+"/"+storage]
}
