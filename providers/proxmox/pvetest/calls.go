package pvetest

import (
	"net/http"
	"time"
)

// vmCall is a call on /nodes/{node}/qemu/{vmid}/…: its node, VMID and parameters.
type vmCall struct {
	node   string
	vmid   int
	params map[string]string
}

// readVMCall parses a VM call's VMID and parameters, checked against the endpoint's names
// and then by check (nil: none). On failure it has written the error.
func readVMCall(w http.ResponseWriter, r *http.Request, check func(map[string]string) *apiError,
	required []string, optional ...string) (vmCall, bool) {
	c := vmCall{node: r.PathValue("node")}
	var e *apiError
	c.vmid, e = vmidParam(r, "vmid")
	if e == nil {
		c.params, e = form(r)
	}
	if e == nil {
		e = schema(c.params, required, optional...)
	}
	if e == nil && check != nil {
		e = check(c.params)
	}
	if e != nil {
		writeError(w, e)
		return vmCall{}, false
	}
	return c, true
}

// accept ends an asynchronous call: the next fault injected for op on node (one that fails
// the call answers now), then a task typ/id whose body fn runs once wait is closed (nil: at
// once) and d has passed — or, with a fault that fails the task, ends with the fault's exit
// instead. It answers the UPID. vmid names the lock file of a lock-timeout fault. Callers
// hold s.mu.
func (s *Server) accept(w http.ResponseWriter, r *http.Request, op Op, node string, vmid int,
	typ, id string, wait <-chan struct{}, d time.Duration, fn work) {
	fault, hasFault := s.nextFault(op, node)
	if hasFault && fault.sync() {
		writeError(w, fault.syncError(vmid))
		return
	}
	t := s.newTask(r, node, typ, id)
	s.spawnAfter(t, wait, d, func() (string, func()) {
		if hasFault {
			return fault.taskExit(vmid), nil
		}
		return fn()
	})
	writeData(w, t.upid.String())
}

// lockedVM finds the VM a read-only call names and returns with s.mu held; on failure it has
// written the error (F2 for a missing VM) and s.mu is free.
func (s *Server) lockedVM(w http.ResponseWriter, r *http.Request) (*vm, bool) {
	vmid, e := vmidParam(r, "vmid")
	if e != nil {
		writeError(w, e)
		return nil, false
	}
	s.mu.Lock()
	v, e := s.lookupVM(r.PathValue("node"), vmid)
	if e != nil {
		s.mu.Unlock()
		writeError(w, e)
		return nil, false
	}
	return v, true
}

// lockedVMCall is readVMCall for a call on an existing VM: it returns with s.mu held and the
// VM found; on failure it has written the error (F2 for a missing VM) and s.mu is free.
func (s *Server) lockedVMCall(w http.ResponseWriter, r *http.Request, check func(map[string]string) *apiError,
	required []string, optional ...string) (vmCall, *vm, bool) {
	c, ok := readVMCall(w, r, check, required, optional...)
	if !ok {
		return vmCall{}, nil, false
	}
	s.mu.Lock()
	v, e := s.lookupVM(c.node, c.vmid)
	if e != nil {
		s.mu.Unlock()
		writeError(w, e)
		return vmCall{}, nil, false
	}
	return c, v, true
}
