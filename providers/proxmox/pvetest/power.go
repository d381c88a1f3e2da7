package pvetest

import (
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// start: POST /nodes/{node}/qemu/{vmid}/status/start
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/qemu/{vmid}/status/start): a
// qmstart task, accepted while the VM is clone-locked and queued behind the lock (F3). The VM
// runs when the task ends OK; Timing.Boot later its agent answers and its image's forward
// proxy listens, configured from the attached seed's egressd.json.
func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	s.power(w, r, OpStart, "qmstart")
}

// stopVM: POST /nodes/{node}/qemu/{vmid}/status/stop
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/qemu/{vmid}/status/stop): a
// qmstop task (hard stop); stopping a stopped VM is OK.
func (s *Server) stopVM(w http.ResponseWriter, r *http.Request) {
	s.power(w, r, OpStop, "qmstop")
}

func (s *Server) power(w http.ResponseWriter, r *http.Request, op Op, typ string) {
	c, v, ok := s.lockedVMCall(w, r, nil, nil, "skiplock", "timeout", "machine", "keepActive", "overrule-shutdown",
		"migratedfrom", "migration_network", "migration_type", "stateuri", "targetstorage", "force-cpu")
	if !ok {
		return
	}
	defer s.mu.Unlock()
	node, vmid := c.node, c.vmid
	s.accept(w, r, op, node, vmid, typ, strconv.Itoa(vmid), v.unlocked, s.timing.Task, func() (string, func()) {
		switch {
		case s.vms[vmid] != v:
			return fmt.Sprintf(msgNoConfig, node, vmid), nil
		case v.locked() != "":
			return fmt.Sprintf(msgLocked, v.locked()), nil
		}
		if op == OpStop {
			return ExitOK, s.powerOff(v)
		}
		return s.powerOn(v), nil
	})
}

// powerOn starts v, answering the task's exit. Callers hold s.mu.
func (s *Server) powerOn(v *vm) string {
	switch {
	case v.running:
		return fmt.Sprintf(msgAlreadyRunning, v.vmid)
	case v.template():
		return "you can't start a vm if it's a template"
	}
	seed, err := s.attachedSeed(v)
	if err != nil {
		return err.Error()
	}
	if len(s.free) == 0 {
		return "start failed: pvetest: the address pool is empty"
	}
	v.addr = s.free[0]
	s.free = slices.Delete(s.free, 0, 1)
	v.running, v.paused, v.booted = true, false, false
	v.startedAt = s.now()
	v.gen++
	v.proxyErr = ""
	gen := v.gen
	s.wg.Add(1)
	go s.boot(v, gen, seed)
	return ExitOK
}

// attachedSeed reads the cdrom ISOs attached to v (ide0–3, sata, scsi cdroms) for a NoCloud
// seed. A missing volume fails the start; no seed, or one without egressd.json, boots an
// image that runs no proxy. Callers hold s.mu.
func (s *Server) attachedSeed(v *vm) (seedResult, error) {
	var res seedResult
	res.err = "no NoCloud seed (cidata) attached"
	for _, key := range slices.Sorted(maps.Keys(v.conf)) {
		if !deviceRE.MatchString(key) || strings.HasPrefix(key, "net") {
			continue
		}
		d, err := parseDrive(v.conf[key])
		if err != nil || d.Media != "cdrom" || d.Volume == "none" || d.Volume == "cdrom" {
			continue
		}
		sid, name, _ := strings.Cut(d.Volume, ":")
		st := s.storages[v.node+"/"+sid]
		if st == nil {
			return seedResult{}, fmt.Errorf("storage '%s' does not exist", sid)
		}
		f, ok := st.files[name]
		if !ok {
			return seedResult{}, fmt.Errorf("volume '%s' does not exist", d.Volume)
		}
		if r := readSeed(f.data); r.err == "" || res.err == "no NoCloud seed (cidata) attached" {
			res = r
		}
	}
	return res, nil
}

// boot waits Timing.Boot, then, if v still runs from the same start, marks the agent up and
// starts the image's forward proxy.
func (s *Server) boot(v *vm, gen int, seed seedResult) {
	defer s.wg.Done()
	if !s.sleep(s.timing.Boot) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.gen != gen || !v.running || s.vms[v.vmid] != v {
		return
	}
	v.booted = true
	if v.paused {
		return
	}
	s.serveSeed(v, seed)
}

// serveSeed starts v's proxy from its seed, or records why not. Callers hold s.mu.
func (s *Server) serveSeed(v *vm, seed seedResult) {
	if seed.err != "" {
		v.proxyErr = seed.err
		s.opts.Logger.Info("pvetest: VM runs no proxy", "vmid", v.vmid, "reason", seed.err)
		return
	}
	p, err := s.startProxy(v, seed)
	if err != nil {
		v.proxyErr = err.Error()
		s.opts.Logger.Warn("pvetest: VM's proxy cannot listen", "vmid", v.vmid, "err", err)
		return
	}
	v.proxy = p
}

// powerOff stops v at once: not running, proxy stopped, address back in the pool. It
// answers the cleanup to run with s.mu released. Callers hold s.mu.
func (s *Server) powerOff(v *vm) func() {
	if !v.running {
		return nil
	}
	v.running, v.paused, v.booted = false, false, false
	v.gen++
	p, addr := v.proxy, v.addr
	v.proxy, v.addr = nil, netip.Addr{}
	return func() {
		p.stop()
		s.mu.Lock()
		s.free = append(s.free, addr)
		s.mu.Unlock()
	}
}

// statusCurrent: GET /nodes/{node}/qemu/{vmid}/status/current
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/qemu/{vmid}/status/current;
// F14: paused is status running, qmpstatus paused).
func (s *Server) statusCurrent(w http.ResponseWriter, r *http.Request) {
	v, ok := s.lockedVM(w, r)
	if !ok {
		return
	}
	vmid := v.vmid
	status, qmp := "stopped", "stopped"
	if v.running {
		status, qmp = "running", "running"
		if v.paused {
			qmp = "paused"
		}
	}
	_, disk, _ := v.bootDisk()
	doc := map[string]any{
		"vmid": vmid, "status": status, "qmpstatus": qmp, "cpus": v.cores(), "maxmem": v.memoryBytes(),
		"maxdisk": disk.Size, "disk": 0, "cpu": 0, "mem": 0, "uptime": 0, "netin": 0, "netout": 0,
		"diskread": 0, "diskwrite": 0, "ha": map[string]any{"managed": 0},
	}
	if n := v.name(); n != "" {
		doc["name"] = n
	}
	if v.agentEnabled() {
		doc["agent"] = 1
	}
	if l := v.locked(); l != "" {
		doc["lock"] = l
	}
	if t := v.conf["tags"]; t != "" {
		doc["tags"] = t
	}
	if v.template() {
		doc["template"] = 1
	}
	if v.running {
		doc["pid"] = 100000 + vmid%100000
		doc["uptime"] = int64(s.now().Sub(v.startedAt).Seconds())
		doc["mem"] = v.memoryBytes() / 4
		doc["running-machine"] = "pc-q35-11.0+pve0"
		doc["running-qemu"] = "11.0.0"
	}
	s.mu.Unlock()
	writeData(w, doc)
}

// agentInterfaces: GET /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces;
// shape F21, errors F5): lo and eth0 with the VM's pool address and a link-local IPv6.
func (s *Server) agentInterfaces(w http.ResponseWriter, r *http.Request) {
	v, ok := s.lockedVM(w, r)
	if !ok {
		return
	}
	vmid := v.vmid
	var e *apiError
	switch {
	case !v.running:
		e = errorf(500, msgVMNotRunning, vmid)
	case !v.agentEnabled():
		e = errorf(500, msgAgentNotConfigured)
	case v.paused:
		e = errorf(500, msgAgentTimeout, vmid)
	case !v.booted:
		e = errorf(500, msgAgentNotRunning)
	}
	if e == nil {
		if f, ok := s.nextFault(OpAgent, v.node); ok {
			e = f.syncError(vmid)
		}
	}
	if e != nil {
		s.mu.Unlock()
		writeError(w, e)
		return
	}
	mac := "bc:24:11:00:00:01"
	if n, err := parseNet(v.conf["net0"]); err == nil {
		mac = strings.ToLower(n.MAC)
	}
	addr := v.addr.String()
	s.mu.Unlock()
	ip := func(a, typ string, prefix int) map[string]any {
		return map[string]any{"ip-address": a, "ip-address-type": typ, "prefix": prefix}
	}
	stats := map[string]any{"rx-bytes": 0, "rx-dropped": 0, "rx-errs": 0, "rx-packets": 0,
		"tx-bytes": 0, "tx-dropped": 0, "tx-errs": 0, "tx-packets": 0}
	writeData(w, map[string]any{"result": []map[string]any{
		{"name": "lo", "hardware-address": "00:00:00:00:00:00", "statistics": stats,
			"ip-addresses": []map[string]any{ip("127.0.0.1", "ipv4", 8), ip("::1", "ipv6", 128)}},
		{"name": "eth0", "hardware-address": mac, "statistics": stats,
			"ip-addresses": []map[string]any{ip(addr, "ipv4", 24), ip(linkLocal(mac), "ipv6", 64)}},
	}})
}

// linkLocal is the EUI-64 fe80:: address of mac, as a guest configures it.
func linkLocal(mac string) string {
	var b [6]byte
	fmt.Sscanf(mac, "%02x:%02x:%02x:%02x:%02x:%02x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5])
	a := [16]byte{0xfe, 0x80, 8: b[0] ^ 2, 9: b[1], 10: b[2], 11: 0xff, 12: 0xfe, 13: b[3], 14: b[4], 15: b[5]}
	return netip.AddrFrom16(a).String()
}

// Pause suspends a running VM as `qm suspend` does (F14): status/current says running with
// qmpstatus paused, cluster/resources plain running, the agent times out, and its proxy
// stops answering (here: stops listening) until Resume.
func (s *Server) Pause(vmid int) error {
	s.mu.Lock()
	v, ok := s.vms[vmid]
	if !ok || !v.running || v.paused {
		s.mu.Unlock()
		return fmt.Errorf("pvetest: VM %d is not running unpaused", vmid)
	}
	v.paused = true
	p := v.proxy
	v.proxy = nil
	s.mu.Unlock()
	p.stop()
	return nil
}

// Resume undoes Pause: the agent answers again (once booted) and the proxy listens again.
func (s *Server) Resume(vmid int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vms[vmid]
	if !ok || !v.paused {
		return fmt.Errorf("pvetest: VM %d is not paused", vmid)
	}
	v.paused = false
	if !v.booted {
		return nil // boot serves the proxy when it ends
	}
	seed, err := s.attachedSeed(v)
	if err != nil {
		v.proxyErr = err.Error()
		return nil
	}
	s.serveSeed(v, seed)
	return nil
}

// PowerOff stops a running VM behind the API's back (a guest that shut itself down or
// crashed): stopped, no proxy, its address back in the pool.
func (s *Server) PowerOff(vmid int) error {
	s.mu.Lock()
	v, ok := s.vms[vmid]
	if !ok || !v.running {
		s.mu.Unlock()
		return fmt.Errorf("pvetest: VM %d is not running", vmid)
	}
	cleanup := s.powerOff(v)
	s.mu.Unlock()
	cleanup()
	return nil
}
