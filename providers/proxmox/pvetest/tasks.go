package pvetest

import (
	"net/http"
	"time"
)

// Task states and the success exit (F16; the API viewer: "OK" and "WARNINGS: N" succeed).
const (
	TaskRunning = "running"
	TaskStopped = "stopped"
	ExitOK      = "OK"
)

// task is one worker (PVE's fork_worker): running until its work ends, then stopped with
// an exitstatus.
type task struct {
	upid    UPID
	user    string // user@realm
	tokenID string
	status  string
	exit    string
	done    chan struct{}
}

// newTask registers a running task on node. Callers hold s.mu.
func (s *Server) newTask(r *http.Request, node, typ, id string) *task {
	user, tokenID := s.caller(r)
	s.pid++
	upidUser := user
	if tokenID != "" {
		upidUser += "!" + tokenID
	}
	t := &task{
		upid: UPID{Node: node, PID: s.pid, PStart: s.pid * 7, StartTime: uint32(s.now().Unix()),
			Type: typ, ID: id, User: upidUser},
		user: user, tokenID: tokenID, status: TaskRunning, done: make(chan struct{}),
	}
	s.tasks[t.upid.String()] = t
	return t
}

// finish stops t with exit. Callers hold s.mu.
func (s *Server) finish(t *task, exit string) {
	if t.status == TaskStopped {
		return
	}
	t.status, t.exit = TaskStopped, exit
	close(t.done)
}

// work is a task's body, called with s.mu held: it answers the exitstatus and, optionally,
// a cleanup run with s.mu released before the task stops (stopping a proxy takes a moment).
type work func() (exit string, cleanup func())

// spawn runs a task's work after d in its own goroutine. A closed simulator leaves the task
// running. Callers hold s.mu.
func (s *Server) spawn(t *task, d time.Duration, fn work) {
	s.spawnAfter(t, nil, d, fn)
}

// spawnAfter is spawn that first waits for wait to close (a lock held by another task):
// PVE's workers queue on the config lock (F3).
func (s *Server) spawnAfter(t *task, wait <-chan struct{}, d time.Duration, fn work) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if wait != nil {
			select {
			case <-wait:
			case <-s.ctx.Done():
				return
			}
		}
		if !s.sleep(d) {
			return
		}
		s.mu.Lock()
		exit, cleanup := fn()
		if cleanup != nil {
			s.mu.Unlock()
			cleanup()
			s.mu.Lock()
		}
		s.finish(t, exit)
		s.mu.Unlock()
	}()
}

// taskStatus: GET /nodes/{node}/tasks/{upid}/status
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/tasks/{upid}/status; fields F16).
func (s *Server) taskStatus(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("upid")
	u, err := ParseUPID(raw)
	if err != nil {
		writeError(w, param("upid", "unable to parse worker upid '"+raw+"'"))
		return
	}
	s.mu.Lock()
	t, ok := s.tasks[raw]
	if !ok || u.Node != r.PathValue("node") {
		s.mu.Unlock()
		writeError(w, param("upid", msgNoSuchTask))
		return
	}
	doc := map[string]any{
		"upid": raw, "node": t.upid.Node, "pid": t.upid.PID, "pstart": t.upid.PStart,
		"starttime": t.upid.StartTime, "type": t.upid.Type, "id": t.upid.ID, "user": t.user,
		"status": t.status,
	}
	if t.tokenID != "" {
		doc["tokenid"] = t.tokenID
	}
	if t.status == TaskStopped {
		doc["exitstatus"] = t.exit
	}
	s.mu.Unlock()
	writeData(w, doc)
}

// TaskDone reports whether the task upid has stopped, and its exitstatus: for tests that
// wait on the simulator's side.
func (s *Server) TaskDone(upid string) (exit string, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[upid]
	if !ok || t.status != TaskStopped {
		return "", false
	}
	return t.exit, true
}
