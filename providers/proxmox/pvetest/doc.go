// Package pvetest is a stateful Proxmox VE API simulator on net/http/httptest, for proving
// the proxmox provider without a PVE: it holds VMs, templates, tasks and ISO storage as PVE
// does, answers with the shapes captured on a real PVE 9.2.20 (facts F1–F23, listed in
// docs/providers/proxmox.md) and those of the public API viewer
// (https://pve.proxmox.com/pve-docs/api-viewer/), and runs every started VM as a real
// forward proxy on its own loopback address.
//
// # Use
//
//	sim, err := pvetest.New(pvetest.Options{
//		Addresses: []netip.Addr{…127.0.N.x…}, // one per running VM
//		Serve: func(ctx context.Context, ln net.Listener, p pvetest.Proxy) error {
//			return forwardproxy.Serve(ctx, ln, forwardproxy.Config{Listen: ln.Addr().String(), AuthFile: p.AuthFile})
//		},
//	})
//	defer sim.Close()
//	// provider config: url = sim.URL() (no /api2/json), token file content = sim.Token(),
//	// nodes [pv1-1], storage local-lvm, isoStorage local, templates {default: {vmid: 9001}}.
//
// Defaults: node pv1-1; storages local-lvm (lvmthin; images, rootdir) and local (dir; iso,
// vztmpl, backup, import) on every node; one template, 9001 as in F19 (scsi0
// local-lvm:base-9001-disk-0,size=3G, efidisk0, boot order=scsi0, agent 1, OVMF, q35,
// net0 virtio=<MAC>,bridge=vmbr0, ide2 free); one token egressd@pve!egressd with a random
// secret; Timing clone 100ms, other tasks 20ms, boot 100ms (CapturedTiming is PVE's pace); the API on 127.0.0.1:0, plain
// http (Options.TLS for https with CACertPEM/CertPool). Everything is under /api2/json.
//
// # The guest
//
// A VM started with a NoCloud seed ISO attached as a cdrom (ide2=<iso storage>:iso/<name>,
// media=cdrom; uploaded through the upload endpoint) boots like an image running egressd's
// forward proxy: at start the simulator reads the ISO (ISO 9660, label cidata) for
// egressd.json ({"v":1,"name":…,"port":…,"auth":…} as providers/libvirt/seed.go writes it);
// Timing.Boot after the start task ends, the guest agent answers and Serve runs on
// <pool address>:<port> with the auth line in Proxy.AuthFile. Without a seed, or with one
// lacking egressd.json, the VM boots and its agent answers but nothing listens (VM.ProxyErr
// says why). Before the boot ends the agent answers 500 "QEMU guest agent is not running"
// (F5); a provider must keep such a VM Provisioning.
//
// The agent reports lo (127.0.0.1, ::1) and eth0 (the pool address, prefix 24, and a
// link-local fe80:: IPv6), the F21 shape. The pool addresses are themselves 127/8 (traffic
// stays on this machine): a provider that skips every loopback address
// (netip.Addr.IsLoopback) finds none here. Skip the interface named lo and link-local addresses instead,
// which is also right on a real guest.
//
// # Endpoints and shapes (each with its source)
//
// All answers are {"data": …} (the API viewer). API viewer:
// https://pve.proxmox.com/pve-docs/api-viewer/ (paths below are under it).
//   - GET /version: version, release, repoid.
//   - GET /nodes/{node}/status: kversion, current-kernel, pveversion, cpuinfo, memory, uptime.
//   - GET /cluster/resources[?type=vm|node|storage]: qemu entries id, type, vmid, name, node,
//     status, template, maxcpu, maxmem, mem, maxdisk, disk, cpu, uptime, net/disk counters;
//     lock and tags only when set; status unknown and no name mid-clone (F8); paused is plain
//     running (F14); a down node is offline and its VMs unknown.
//   - GET /cluster/nextid: the lowest free VMID as a string; reserves nothing.
//   - GET|PUT /nodes/{node}/qemu/{vmid}/config: GET the keys plus digest (integers as JSON
//     numbers), mid-clone only {lock: clone, digest}; PUT synchronous, null; 500 "VM is locked
//     (clone)" while cloning (F7); tags folded to lower case, ';'-separated, a space or '!' a
//     400 (F9); netN without a MAC gets one; a newly attached drive (ide2) is appended to
//     boot order (F19: order=scsi0;ide2); digest mismatch refused; delete=k1,k2 removes keys.
//     Keys taken: see configKeys in config.go; others are a 400 naming the key.
//   - POST /nodes/{node}/qemu/{vmid}/clone {newid, name, description, full, target, storage,
//     pool, …}: synchronous checks, then a qmclone UPID whose id is the source VMID. Taken
//     newid: 500 "unable to create VM N: config file already exists" (F4). full defaults to
//     0 for a template, 1 otherwise; full=0 from a non-template: 500 "Linked clone feature is
//     not supported for '<volid>' (scsi0)"; storage with full=0: 500 "parameter 'storage' not
//     allowed for linked clones"; storage without images: 400 errors.storage (F15). The new
//     VM exists at once with lock clone for Timing.Clone; description is kept verbatim (F10);
//     meta (ctime) is the template's (F11); NICs get new MACs; disks are linked
//     (base-9001-disk-0/vm-N-disk-0) or full (vm-N-disk-0).
//   - PUT …/resize {disk, size}: a resize task, queued behind a clone lock; +N grows, N sets;
//     same size OK; shrink fails in the task "shrinking disks is not supported" (F20).
//   - POST …/status/start, …/status/stop: qmstart/qmstop tasks, accepted while clone-locked
//     and queued behind the lock (F3). Starting a running VM fails in the task "VM N already
//     running"; stopping a stopped one is OK. A start with an attached ISO that does not
//     exist fails in the task "volume '<volid>' does not exist".
//   - GET …/status/current: status, qmpstatus (stopped|running|paused, F14), vmid, name,
//     cpus, maxmem, maxdisk, uptime, pid (running), agent (1 when configured), ha, lock?,
//     tags?.
//   - GET …/agent/network-get-interfaces: result[]{name, hardware-address, ip-addresses[
//     {ip-address, ip-address-type, prefix}], statistics} (F21); 500 "VM N is not running",
//     "No QEMU guest agent configured", "QEMU guest agent is not running" (F5), and for a
//     paused VM "VM N qmp command 'guest-ping' failed - got timeout" (the API viewer).
//   - DELETE /nodes/{node}/qemu/{vmid}[?purge=1&destroy-unreferenced-disks=1]: qmdestroy UPID;
//     500 "VM N is running - destroy failed" and "VM is locked (clone)" synchronously
//     (the API viewer). The VM's seed ISO stays on ISO storage.
//   - GET /nodes/{node}/tasks/{upid}/status: upid, node, pid, pstart, starttime, type, id,
//     user, tokenid, status running|stopped, exitstatus once stopped (F16); unknown UPID:
//     400 errors.upid "no such task"; malformed: 400 errors.upid.
//   - POST /nodes/{node}/storage/{storage}/upload: multipart content=iso and a file part
//     named filename whose filename= is the target (F12); an imgcopy UPID with an empty id;
//     a name without .iso/.img: 400 errors.filename "wrong file extension"; content other than
//     iso/vztmpl/import: 400 errors.content; a storage without iso content: 500; re-upload
//     overwrites silently.
//   - DELETE /nodes/{node}/storage/{storage}/content/{volume}: an imgdel UPID, id the storage;
//     a missing volume is accepted and ends OK (F13).
//   - GET /nodes/{node}/storage/{storage}/status: content, type, active, enabled, shared,
//     total, used, avail; unknown storage 400 errors.storage "No such storage.".
//   - GET /nodes/{node}/storage/{storage}/content: the uploaded files (volid, size, format).
//
// Missing VM on config, status/current, agent, start/stop, resize, clone source and DELETE:
// 500 "Configuration file 'nodes/<node>/qemu-server/<vmid>.conf' does not exist" (F2). An
// unknown path is 501 "Method 'GET /x' not implemented"; an unknown node a 500 hostname
// lookup error; bad parameters 400 "Parameter verification failed." with errors{field: text}.
//
// Errors (F1): the text is both the HTTP reason phrase ("500 VM is locked (clone)") and the
// body's message ending "\n", with data null. Go's net/http cannot write a custom reason, so
// error answers are written on the hijacked connection, which is then closed (Connection:
// close). 401 (F22): "401 No ticket" without an Authorization: PVEAPIToken=… header,
// "401 Authentication failed!" for an unknown token or wrong secret, both with an empty
// body; the header is checked on every request. HTTP/1.1 only (F18).
//
// # Faults and observations
//
//   - FailNext(op, node, faults…): the next calls of op fail: FaultLockTimeout (the task ends
//     "can't lock file '/var/lock/qemu-server/lock-<vmid>.conf' - got timeout", the clone
//     source's VMID for a clone, and nothing changes: no VM is left), FaultLockTimeoutSync (the
//     call answers that as a 500), FaultTaskFailed (the task ends with Fault.Exit),
//     FaultHTTP (any status and text; 595/596 bodiless; PermissionDenied(path, priv) builds
//     PVE's 403 "Permission check failed (path, priv)"), FaultAbandoned (clone only: the
//     worker dies, the task ends "unexpected status", the VM stays locked, nameless and
//     unknown until Unlock(vmid), as `qm unlock`). Ops: OpClone, OpConfig, OpResize,
//     OpStart, OpStop, OpDestroy, OpAgent, OpUpload, OpDeleteVolume.
//   - Options.CloneContention = N: a clone that starts while N clones are in flight on the
//     same node and storage fails in its task with that lock timeout, as users of parallel
//     clones report (bpg/terraform-provider-proxmox #995, #1521).
//   - SetNodeDown(node, 595|596): every /nodes/{node}/… call answers "595 No route to host" or
//     "596 Connection timed out" (pveproxy failing to reach the node); 0 restores it.
//   - Pause(vmid) / Resume(vmid): F14's paused VM (agent times out, proxy stops listening);
//     PowerOff(vmid): the guest stopped behind the API's back.
//   - PutVM(node, vmid, conf): a foreign VM occupying a VMID.
//   - ClonesInFlight(node, storage), MaxClonesInFlight(node, storage): clone tasks running
//     on node onto storage (the source disk's unless the call named one), and their high-water
//     mark since New. Calls(route): requests per route, e.g. Calls("POST
//     /nodes/{node}/qemu/{vmid}/clone").
//   - VMs(), VM(vmid): VMs with status, lock, address, whether a proxy runs, config copy.
//     Volumes(node, storage), Volume(node, volid): uploaded files and their bytes.
//     TaskDone(upid): a task's end as the simulator sees it. ParseUPID and UPID: the task
//     ID's parts.
//
// # Not modelled
//
// Tickets (POST /access/ticket) and CSRF; permissions and roles (every valid token may do
// everything; F13/F17's 403s come only injected, PermissionDenied); pools, snapshots, HA,
// replication, migration (target= only moves a clone when its disks are on shared
// storage); POST config (asynchronous); pending changes (a PUT config on a running VM
// applies at once); task logs and task lists; disk images as storage content (the images
// storages hold no volumes; destroy-unreferenced-disks is accepted and does nothing more);
// disk allocation by config ("local-lvm:4"); space accounting and no-space errors (F6: not
// produced); storage content checks of uploads (an upload is stored as sent; a seed that is
// not ISO 9660 only means the guest runs no proxy); checksum verification of uploads; LXC;
// the guest's network (the VLAN tag and bridge are stored, not enforced); the flock wait of
// PVE's workers (a queued task waits for the clone however long it takes, where PVE would
// time out after 10 s); a paused guest's TCP stack (its proxy stops listening, where a real
// one would leave connections hanging); exact texts of errors no fact captured (parameter
// errors, storage errors, hostname lookup, unknown paths) — a provider must not match on
// those.
package pvetest
