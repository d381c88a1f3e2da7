package pvetest

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// configKeys are the config keys PUT …/config takes here; "#" stands for a number. Keys
// outside the list answer qemu-server's 400 for an unknown property.
var configKeys = []string{
	"name", "description", "cores", "sockets", "memory", "balloon", "agent", "tags", "onboot",
	"ostype", "cpu", "machine", "bios", "scsihw", "boot", "bootdisk", "vga", "protection",
	"numa", "hotplug", "startup", "kvm", "tablet", "efidisk0", "tpmstate0", "smbios1", "vmgenid",
	"meta", "ciuser", "cipassword", "citype", "sshkeys", "searchdomain", "nameserver",
	"net#", "ide#", "scsi#", "virtio#", "sata#", "serial#", "ipconfig#", "unused#",
	"delete", "digest", "revert", "skiplock",
}

// tagRE is PVE's tag format; F9: hyphens pass, uppercase is folded, ';' separates.
var tagRE = regexp.MustCompile(`^[a-z0-9_][a-z0-9_\-+.]*$`)

// getConfig: GET /nodes/{node}/qemu/{vmid}/config
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/qemu/{vmid}/config): the keys
// plus digest; mid-clone only lock: clone (qmclone's temporary file); F2 when absent.
func (s *Server) getConfig(w http.ResponseWriter, r *http.Request) {
	v, ok := s.lockedVM(w, r)
	if !ok {
		return
	}
	doc := map[string]any{"digest": v.digest()}
	for k, val := range v.conf {
		if n, err := strconv.ParseInt(val, 10, 64); err == nil && numericKey(k) {
			doc[k] = n // PVE types integers as JSON numbers
		} else {
			doc[k] = val
		}
	}
	s.mu.Unlock()
	writeData(w, doc)
}

func numericKey(k string) bool {
	switch k {
	// memory is a property string since PVE 8.1 ("current=…"), so it stays a string.
	case "cores", "sockets", "balloon", "template", "onboot", "protection", "numa", "kvm", "tablet":
		return true
	}
	return false
}

// putConfig: PUT /nodes/{node}/qemu/{vmid}/config, synchronous (returns null): F2; F7 while
// locked; values checked; tags folded (F9); a new cdrom or disk appended to boot order (F19).
func (s *Server) putConfig(w http.ResponseWriter, r *http.Request) {
	c, v, ok := s.lockedVMCall(w, r, checkConfigValues, nil, configKeys...)
	if !ok {
		return
	}
	defer s.mu.Unlock()
	node, vmid, params := c.node, c.vmid, c.params
	if l := v.locked(); l != "" {
		writeError(w, errorf(500, msgLocked, l)) // F7
		return
	}
	if d := params["digest"]; d != "" && d != v.digest() {
		writeError(w, errorf(500, "detected modified configuration - file changed by other user? Try again."))
		return
	}
	if f, ok := s.nextFault(OpConfig, node); ok {
		writeError(w, f.syncError(vmid))
		return
	}
	conf := maps.Clone(v.conf)
	for _, k := range strings.FieldsFunc(params["delete"], func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
		delete(conf, k)
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		val := params[k]
		switch {
		case k == "delete" || k == "digest" || k == "revert" || k == "skiplock":
			continue
		case k == "tags":
			val = foldTags(val)
		case strings.HasPrefix(k, "net"):
			n, _ := parseNet(val)
			if n.MAC == "" {
				n.MAC = randomMAC()
			}
			val = n.String()
		case deviceRE.MatchString(k):
			if _, had := conf[k]; !had && params["boot"] == "" {
				conf["boot"] = appendBoot(conf["boot"], k)
			}
		}
		conf[k] = val
	}
	v.conf = conf
	writeData(w, nil)
}

// checkConfigValues checks the values a PUT config carries, naming each bad one.
func checkConfigValues(params map[string]string) *apiError {
	errs := map[string]string{}
	for k, val := range params {
		var err error
		switch {
		case k == "name":
			if !dnsNameRE.MatchString(val) {
				err = fmt.Errorf("value does not look like a valid DNS name")
			}
		case k == "cores" || k == "sockets":
			if n, e := strconv.Atoi(val); e != nil || n < 1 || n > 1024 {
				err = fmt.Errorf("value must be an integer from 1 to 1024")
			}
		case k == "memory":
			m := val
			if p, e := parsePropString(val, "current"); e == nil {
				m, _ = p.get("current")
			}
			if n, e := strconv.Atoi(m); e != nil || n < 16 {
				err = fmt.Errorf("value must be at least 16 (MiB)")
			}
		case k == "agent":
			if p, e := parsePropString(val, "enabled"); e != nil {
				err = e
			} else if en, _ := p.get("enabled"); en != "0" && en != "1" {
				err = fmt.Errorf("enabled must be 0 or 1")
			}
		case k == "tags":
			for _, t := range splitTags(val) {
				if !tagRE.MatchString(strings.ToLower(t)) {
					err = fmt.Errorf("invalid characters in tag '%s'", t)
					break
				}
			}
		case k == "boot":
			_, err = parseBoot(val)
		case strings.HasPrefix(k, "net") && deviceRE.MatchString(k):
			_, err = parseNet(val)
		case deviceRE.MatchString(k) && k != "efidisk0" && k != "tpmstate0":
			_, err = parseDrive(val)
		case strings.HasPrefix(k, "ide") || strings.HasPrefix(k, "sata") || strings.HasPrefix(k, "scsi") || strings.HasPrefix(k, "virtio"):
			if k != "scsihw" {
				err = fmt.Errorf("no such device")
			}
		}
		if err != nil {
			errs[k] = "invalid format - " + err.Error()
		}
	}
	if len(errs) > 0 {
		return paramError(errs)
	}
	return nil
}

// splitTags splits a tag list on PVE's separators ';' and ','. Spaces are not separators
// (F9: a space is an invalid character).
func splitTags(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' })
}

// foldTags is the list as stored: lowercased (F9), ';'-separated, sorted, unique.
func foldTags(s string) string {
	var out []string
	for _, t := range splitTags(s) {
		t = strings.ToLower(t)
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ";")
}

// appendBoot adds device to boot's order when boot has one and lacks it (F19: attaching ide2
// to 9001 made order=scsi0;ide2).
func appendBoot(boot, device string) string {
	order, err := parseBoot(boot)
	if err != nil || order == nil || slices.Contains(order, device) {
		return boot
	}
	return "order=" + strings.Join(append(order, device), ";")
}

// resize: PUT /nodes/{node}/qemu/{vmid}/resize
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/qemu/{vmid}/resize; F20): a
// resize task that queues behind a clone lock (lock_config in the worker) and fails in the
// task on a missing disk, a cdrom or a shrink; the same size is an OK no-op.
func (s *Server) resize(w http.ResponseWriter, r *http.Request) {
	c, v, ok := s.lockedVMCall(w, r, checkResize, []string{"disk", "size"}, "digest", "skiplock")
	if !ok {
		return
	}
	defer s.mu.Unlock()
	node, vmid, params := c.node, c.vmid, c.params
	s.accept(w, r, OpResize, node, vmid, "resize", strconv.Itoa(vmid), v.unlocked, s.timing.Task, func() (string, func()) {
		if s.vms[vmid] != v {
			return fmt.Sprintf(msgNoConfig, node, vmid), nil
		}
		if l := v.locked(); l != "" {
			return fmt.Sprintf(msgLocked, l), nil
		}
		disk := params["disk"]
		if v.conf[disk] == "" {
			return fmt.Sprintf("disk '%s' does not exist", disk), nil
		}
		d, err := parseDrive(v.conf[disk])
		if err != nil {
			return fmt.Sprintf("unable to parse drive options for '%s'", disk), nil
		}
		if d.Media == "cdrom" {
			return "you can't resize a cdrom", nil
		}
		size := params["size"]
		n, err := parseSize(strings.TrimPrefix(size, "+"))
		if err != nil {
			return err.Error(), nil
		}
		if strings.HasPrefix(size, "+") {
			n += d.Size
		}
		switch {
		case n < d.Size:
			return msgShrink, nil // F20
		case n == d.Size:
			return ExitOK, nil
		}
		d.Size = n
		v.conf[disk] = d.String()
		return ExitOK, nil
	})
}

var resizeSizeRE = regexp.MustCompile(`^\+?\d+(\.\d+)?[KMGT]?$`)

func checkResize(params map[string]string) *apiError {
	if !resizeSizeRE.MatchString(params["size"]) {
		return param("size", "value does not match the regex pattern")
	}
	if !deviceRE.MatchString(params["disk"]) {
		return param("disk", "value '"+params["disk"]+"' does not have a value in the enumeration")
	}
	return nil
}

// destroy: DELETE /nodes/{node}/qemu/{vmid}
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/qemu/{vmid}): F2, running and
// locked refused synchronously (the API viewer), then a qmdestroy task. The seed ISO on ISO
// storage is not the VM's and stays.
func (s *Server) destroy(w http.ResponseWriter, r *http.Request) {
	c, v, ok := s.lockedVMCall(w, r, checkDestroy, nil, "purge", "destroy-unreferenced-disks", "skiplock")
	if !ok {
		return
	}
	defer s.mu.Unlock()
	node, vmid := c.node, c.vmid
	switch {
	case v.running:
		writeError(w, errorf(500, msgDestroyRunning, vmid))
		return
	case v.locked() != "":
		writeError(w, errorf(500, msgLocked, v.locked()))
		return
	}
	s.accept(w, r, OpDestroy, node, vmid, "qmdestroy", strconv.Itoa(vmid), nil, s.timing.Task, func() (string, func()) {
		switch {
		case s.vms[vmid] != v:
			return fmt.Sprintf(msgNoConfig, node, vmid), nil
		case v.running:
			return fmt.Sprintf(msgDestroyRunning, vmid), nil
		case v.locked() != "":
			return fmt.Sprintf(msgLocked, v.locked()), nil
		}
		delete(s.vms, vmid)
		return ExitOK, nil
	})
}

func checkDestroy(params map[string]string) *apiError {
	if _, e := boolParam(params, "purge", false); e != nil {
		return e
	}
	_, e := boolParam(params, "destroy-unreferenced-disks", false)
	return e
}
