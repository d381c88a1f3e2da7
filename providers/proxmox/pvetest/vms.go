package pvetest

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// vm is one QEMU guest and its config file (/etc/pve/nodes/<node>/qemu-server/<vmid>.conf).
type vm struct {
	vmid int
	node string
	conf map[string]string // the config's keys, as GET config answers them (lock included)

	cloning   bool          // mid-clone: the config is qmclone's temporary file (F8)
	abandoned bool          // its clone's worker died; only Unlock clears it
	unlocked  chan struct{} // closed when the clone lock clears: queued workers go on (F3)

	running   bool
	paused    bool // running with qmpstatus paused (F14)
	startedAt time.Time
	booted    bool // the guest agent answers (after Timing.Boot)
	gen       int  // bumped on every start and stop, so a stale boot does nothing
	addr      netip.Addr
	proxy     *proxy
	proxyErr  string // why the booted image runs no proxy, "" when it does
}

func (v *vm) locked() string { return v.conf["lock"] }

func (v *vm) template() bool { return v.conf["template"] == "1" }

func (v *vm) name() string { return v.conf["name"] }

// agentEnabled reads agent: "1" or "enabled=1,…" (qemu-server's agent format).
func (v *vm) agentEnabled() bool {
	a := v.conf["agent"]
	if a == "" {
		return false
	}
	p, err := parsePropString(a, "enabled")
	if err != nil {
		return false
	}
	e, _ := p.get("enabled")
	return e == "1"
}

// bootDisk is the first disk of boot order that is not a cdrom or a NIC, else scsi0/virtio0/
// sata0/ide0 (the provider's boot-disk rule, docs/providers/proxmox.md, applied here to report maxdisk).
func (v *vm) bootDisk() (string, driveConf, bool) {
	order, _ := parseBoot(v.conf["boot"])
	if d := v.conf["bootdisk"]; d != "" {
		order = append(order, d)
	}
	order = append(order, "scsi0", "virtio0", "sata0", "ide0")
	for _, key := range order {
		if strings.HasPrefix(key, "net") {
			continue
		}
		d, err := parseDrive(v.conf[key])
		if err != nil || d.Media == "cdrom" {
			continue
		}
		return key, d, true
	}
	return "", driveConf{}, false
}

func (v *vm) cores() int {
	c, _ := strconv.Atoi(v.conf["cores"])
	if c <= 0 {
		c = 1
	}
	s, _ := strconv.Atoi(v.conf["sockets"])
	if s <= 0 {
		s = 1
	}
	return c * s
}

// memoryBytes reads memory: "2048" or "current=2048,…" (MiB; default 512).
func (v *vm) memoryBytes() int64 {
	m := v.conf["memory"]
	if p, err := parsePropString(m, "current"); err == nil {
		m, _ = p.get("current")
	}
	n, err := strconv.ParseInt(m, 10, 64)
	if err != nil || n <= 0 {
		n = 512
	}
	return n << 20
}

// digest is the SHA1 of the config as written, PVE's guard against concurrent edits.
func (v *vm) digest() string {
	h := sha1.New()
	for _, k := range slices.Sorted(maps.Keys(v.conf)) {
		fmt.Fprintf(h, "%s: %s\n", k, v.conf[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Template is a template VM present when the simulator starts. The zero value of every
// field but VMID takes F19's template 9001: scsi0 on local-lvm, boot: order=scsi0, ide2
// free, agent 1, OVMF, q35, net0 virtio untagged on vmbr0.
type Template struct {
	VMID    int    // ≥ 100
	Node    string // default Options.Nodes[0]
	Name    string // default "debian-13-egressd"
	Storage string // the boot disk's storage; default "local-lvm"
	DiskGiB int    // scsi0's size; default 3
	MAC     string // net0's MAC; default a random BC:24:11 one (PVE's OUI)
	// Plain makes it an ordinary VM (template absent): clones are full only, as for any
	// non-template VM.
	Plain bool
	// Config adds or replaces config keys; an empty value removes one (e.g. {"agent": ""}
	// for a template without the agent, {"ide2": "local-lvm:vm-9000-cloudinit,media=cdrom"}
	// for F19's unsuitable 9000).
	Config map[string]string
}

// DefaultTemplate is F19's template 9001.
func DefaultTemplate() Template { return Template{VMID: 9001} }

func (s *Server) addTemplate(t Template) error {
	if t.VMID < 100 || t.VMID > 999999999 {
		return fmt.Errorf("pvetest: Template.VMID %d is not a VMID", t.VMID)
	}
	if t.Node == "" {
		t.Node = s.opts.Nodes[0]
	}
	if !s.knownNode(t.Node) {
		return fmt.Errorf("pvetest: template %d: Node %q is not in Options.Nodes", t.VMID, t.Node)
	}
	if _, taken := s.vms[t.VMID]; taken {
		return fmt.Errorf("pvetest: template %d is defined twice", t.VMID)
	}
	if t.Name == "" {
		t.Name = "debian-13-egressd"
	}
	if t.Storage == "" {
		t.Storage = "local-lvm"
	}
	if st := s.storages[t.Node+"/"+t.Storage]; st == nil || !st.content["images"] {
		return fmt.Errorf("pvetest: template %d: Storage %q does not hold images", t.VMID, t.Storage)
	}
	if t.DiskGiB <= 0 {
		t.DiskGiB = 3
	}
	if t.MAC == "" {
		t.MAC = randomMAC()
	}
	if !macRE.MatchString(t.MAC) {
		return fmt.Errorf("pvetest: template %d: MAC %q is not a MAC address", t.VMID, t.MAC)
	}
	prefix := "base"
	if t.Plain {
		prefix = "vm"
	}
	conf := map[string]string{
		"name":     t.Name,
		"agent":    "1",
		"bios":     "ovmf",
		"boot":     "order=scsi0",
		"cores":    "1",
		"cpu":      "x86-64-v2-AES",
		"efidisk0": fmt.Sprintf("%s:%s-%d-disk-1,efitype=4m,pre-enrolled-keys=1,size=4M", t.Storage, prefix, t.VMID),
		"machine":  "q35",
		"memory":   "1024",
		"meta":     fmt.Sprintf("creation-qemu=11.0.0,ctime=%d", s.now().Add(-30*24*time.Hour).Unix()),
		"net0":     fmt.Sprintf("virtio=%s,bridge=vmbr0", strings.ToUpper(t.MAC)),
		"ostype":   "l26",
		"scsi0":    fmt.Sprintf("%s:%s-%d-disk-0,size=%dG", t.Storage, prefix, t.VMID, t.DiskGiB),
		"scsihw":   "virtio-scsi-single",
		"serial0":  "socket",
		"smbios1":  "uuid=" + uuid(),
		"vga":      "serial0",
		"vmgenid":  uuid(),
		"template": "1",
	}
	if t.Plain {
		delete(conf, "template")
	}
	for k, v := range t.Config {
		if v == "" {
			delete(conf, k)
		} else {
			conf[k] = v
		}
	}
	s.vms[t.VMID] = &vm{vmid: t.VMID, node: t.Node, conf: conf, unlocked: closedChan()}
	return nil
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// randomMAC is what qemu-server gives a new NIC: PVE's OUI BC:24:11 and three random bytes.
func randomMAC() string {
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", b[0], b[1], b[2])
}

// lookupVM finds vmid on node, or answers F2. Callers hold s.mu.
func (s *Server) lookupVM(node string, vmid int) (*vm, *apiError) {
	v, ok := s.vms[vmid]
	if !ok || v.node != node {
		return nil, errorf(500, msgNoConfig, node, vmid)
	}
	return v, nil
}

// VM is a VM as tests see it.
type VM struct {
	VMID     int
	Node     string
	Name     string // "" mid-clone
	Status   string // "running", "stopped", or "unknown" mid-clone
	Paused   bool
	Lock     string
	Template bool
	Address  netip.Addr        // while running
	Booted   bool              // the agent answers
	Proxy    bool              // a forward proxy is being served
	ProxyErr string            // why a booted VM serves no proxy (no seed, no egressd.json, ...)
	Config   map[string]string // a copy of the config
}

// VMs lists every VM and template by VMID.
func (s *Server) VMs() []VM {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]VM, 0, len(s.vms))
	for _, id := range slices.Sorted(maps.Keys(s.vms)) {
		out = append(out, s.view(s.vms[id]))
	}
	return out
}

// VM is one VM by VMID.
func (s *Server) VM(vmid int) (VM, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vms[vmid]
	if !ok {
		return VM{}, false
	}
	return s.view(v), true
}

func (s *Server) view(v *vm) VM {
	return VM{VMID: v.vmid, Node: v.node, Name: v.name(), Status: v.status(), Paused: v.paused,
		Lock: v.locked(), Template: v.template(), Address: v.addr, Booted: v.booted,
		Proxy: v.proxy != nil, ProxyErr: v.proxyErr, Config: maps.Clone(v.conf)}
}

// status is the VM's status as cluster/resources reports it (F8, F14).
func (v *vm) status() string {
	switch {
	case v.cloning:
		return "unknown"
	case v.running:
		return "running"
	}
	return "stopped"
}

// PutVM creates a stopped, ordinary VM with config conf (name, description, … as given): a
// VM someone else made, e.g. one occupying a VMID the provider probes (F4).
func (s *Server) PutVM(node string, vmid int, conf map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.knownNode(node) {
		return fmt.Errorf("pvetest: unknown node %q", node)
	}
	if vmid < 100 || vmid > 999999999 {
		return fmt.Errorf("pvetest: %d is not a VMID", vmid)
	}
	if _, taken := s.vms[vmid]; taken {
		return fmt.Errorf("pvetest: VMID %d is taken", vmid)
	}
	s.vms[vmid] = &vm{vmid: vmid, node: node, conf: maps.Clone(conf), unlocked: closedChan()}
	if s.vms[vmid].conf == nil {
		s.vms[vmid].conf = map[string]string{}
	}
	return nil
}
