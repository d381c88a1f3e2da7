package pvetest

import (
	"fmt"
	"net/http"
	"slices"
)

// Op names a call faults can be injected into.
type Op string

const (
	OpClone        Op = "clone"   // POST …/qemu/{vmid}/clone
	OpConfig       Op = "config"  // PUT …/qemu/{vmid}/config (no task)
	OpResize       Op = "resize"  // PUT …/qemu/{vmid}/resize
	OpStart        Op = "start"   // POST …/status/start
	OpStop         Op = "stop"    // POST …/status/stop
	OpDestroy      Op = "destroy" // DELETE …/qemu/{vmid}
	OpAgent        Op = "agent"   // GET …/agent/network-get-interfaces (no task)
	OpUpload       Op = "upload"  // POST …/storage/{storage}/upload
	OpDeleteVolume Op = "imgdel"  // DELETE …/storage/{storage}/content/{volume}
)

// FaultKind is how an injected fault fails its call.
type FaultKind int

const (
	// FaultLockTimeout: the call is accepted (a UPID) and its task ends with
	// "can't lock file '/var/lock/qemu-server/lock-<vmid>.conf' - got timeout" (for a clone
	// the source VMID), having changed nothing: a clone leaves no VM.
	FaultLockTimeout FaultKind = iota + 1
	// FaultLockTimeoutSync: the call itself answers 500 with that text (status line and body).
	FaultLockTimeoutSync
	// FaultTaskFailed: the call is accepted and its task ends with Fault.Exit, having changed
	// nothing (an upload stores no file).
	FaultTaskFailed
	// FaultHTTP: the call answers Fault.Status with Fault.Message in the F1 style (595 and 596
	// with no body, as pveproxy sends them).
	FaultHTTP
	// FaultAbandoned (clone only): the clone's worker dies mid-clone (a node crash, a kill):
	// its task ends "unexpected status" and the new VM stays as qmclone left it, locked
	// (clone), nameless, status unknown, until Unlock — the stuck lock of the provider guide's
	// risks ("qm unlock").
	FaultAbandoned
)

// exitUnexpected is what PVE reports for a task whose worker vanished.
const exitUnexpected = "unexpected status"

// Fault is one injected failure. For OpConfig and OpAgent, which run no task, the task kinds
// answer 500 with their text instead.
type Fault struct {
	Kind    FaultKind
	Exit    string // FaultTaskFailed: the task's exitstatus
	Status  int    // FaultHTTP
	Message string // FaultHTTP, without the trailing "\n"
}

// PermissionDenied is the 403 PVE answers when the token lacks priv on path, e.g.
// PermissionDenied("/storage/proxy-seeds", "Datastore.Allocate") for F13's seed delete
// without that privilege. The simulator checks no permissions itself: inject this.
func PermissionDenied(path, priv string) Fault {
	return Fault{Kind: FaultHTTP, Status: http.StatusForbidden, Message: fmt.Sprintf("Permission check failed (%s, %s)", path, priv)}
}

type faultKey struct {
	op   Op
	node string
}

// FailNext queues faults for the next calls of op on node, one per call, in order. Calls
// refused before the fault's turn (bad parameters, F2, F4, F7) do not consume one.
func (s *Server) FailNext(op Op, node string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := faultKey{op, node}
	s.faults[k] = append(s.faults[k], faults...)
}

// nextFault pops the next fault for op on node. Callers hold s.mu.
func (s *Server) nextFault(op Op, node string) (Fault, bool) {
	k := faultKey{op, node}
	q := s.faults[k]
	if len(q) == 0 {
		return Fault{}, false
	}
	f := q[0]
	s.faults[k] = slices.Delete(q, 0, 1)
	return f, true
}

// sync reports whether the fault fails the call itself.
func (f Fault) sync() bool { return f.Kind == FaultLockTimeoutSync || f.Kind == FaultHTTP }

// syncError is the answer of a fault that fails the call itself, or of any fault on a call
// without a task.
func (f Fault) syncError(vmid int) *apiError {
	switch f.Kind {
	case FaultHTTP:
		status := f.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		if status == StatusNoRoute || status == StatusTimedOut {
			if f.Message == "" {
				return nodeDownError(status)
			}
			return &apiError{status: status, message: f.Message, emptyBody: true}
		}
		return &apiError{status: status, message: f.Message}
	case FaultTaskFailed:
		return errorf(500, "%s", f.Exit)
	case FaultAbandoned:
		return errorf(500, exitUnexpected)
	}
	return errorf(500, msgLockTimeout, vmid)
}

// taskExit is the exitstatus of a fault that fails the task.
func (f Fault) taskExit(vmid int) string {
	switch f.Kind {
	case FaultTaskFailed:
		if f.Exit == "" {
			return "task failed (injected)"
		}
		return f.Exit
	case FaultAbandoned:
		return exitUnexpected
	}
	return fmt.Sprintf(msgLockTimeout, vmid)
}

// Unlock clears a VM's lock as `qm unlock` does. A VM an abandoned clone left becomes an
// empty, stopped config (qmclone's temporary file without its lock line); queued workers
// go on.
func (s *Server) Unlock(vmid int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vms[vmid]
	if !ok || v.locked() == "" {
		return fmt.Errorf("pvetest: VM %d is not locked", vmid)
	}
	if v.cloning && !v.abandoned {
		return fmt.Errorf("pvetest: VM %d is still being cloned", vmid)
	}
	delete(v.conf, "lock")
	v.cloning, v.abandoned = false, false
	select {
	case <-v.unlocked: // a lock not taken by a clone (PutVM): nothing waits on it
	default:
		close(v.unlocked)
	}
	return nil
}

// SetNodeDown makes every call proxied to node (/nodes/{node}/…) answer status, 595 or 596,
// as pveproxy does when the node is unreachable; 0 brings it back. cluster/resources still
// answers, with the node offline and its VMs' status unknown.
func (s *Server) SetNodeDown(node string, status int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.knownNode(node) {
		return fmt.Errorf("pvetest: unknown node %q", node)
	}
	switch status {
	case 0:
		delete(s.down, node)
	case StatusNoRoute, StatusTimedOut:
		s.down[node] = status
	default:
		return fmt.Errorf("pvetest: node-down status %d is not 595 or 596", status)
	}
	return nil
}
