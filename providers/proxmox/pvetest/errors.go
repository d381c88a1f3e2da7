package pvetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// apiError is an error answer as pve-http-server writes it (F1): the text in the HTTP reason
// phrase and, since libpve-http-server-perl 5.2.0, also in the body's "message" (ending
// "\n"), with "data": null; a 400 parameter error adds "errors" (field → text). A 401 has the
// reason only and an empty body (F22); so have 595/596 here.
type apiError struct {
	status    int
	message   string            // without the trailing "\n"
	errs      map[string]string // 400 only
	emptyBody bool
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.status, e.message) }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, message: fmt.Sprintf(format, args...)}
}

// paramError is PVE's "Parameter verification failed." (400) naming each bad field.
func paramError(errs map[string]string) *apiError {
	return &apiError{status: http.StatusBadRequest, message: "Parameter verification failed.", errs: errs}
}

func param(field, text string) *apiError { return paramError(map[string]string{field: text}) }

// Messages the simulator uses, each from a captured fact (F1–F23, docs/providers/proxmox.md) or the API
// viewer and users' reports.
const (
	msgNoTicket   = "No ticket"              // F22: no credentials
	msgAuthFailed = "Authentication failed!" // F22: wrong secret or unknown token
	// F2: a VMID with no config, on config, status/current and DELETE.
	msgNoConfig = "Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist"
	// F4: clone onto a taken VMID, synchronous.
	msgConfigExists = "unable to create VM %d: config file already exists"
	// F7: a config write (or resize, destroy) while the VM holds a lock.
	msgLocked = "VM is locked (%s)"
	// F5: the agent's three errors.
	msgAgentNotRunning    = "QEMU guest agent is not running"
	msgAgentNotConfigured = "No QEMU guest agent configured"
	msgVMNotRunning       = "VM %d is not running"
	// the API viewer: the agent of a VM that cannot answer (here: paused).
	msgAgentTimeout = "VM %d qmp command 'guest-ping' failed - got timeout"
	// the API viewer: DELETE of a running VM.
	msgDestroyRunning = "VM %d is running - destroy failed"
	// The lock timeout users of parallel clones report (bpg #995, #1521).
	msgLockTimeout = "can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout"
	// F20: shrinking in a resize task.
	msgShrink = "shrinking disks is not supported"
	// the API viewer: unknown task.
	msgNoSuchTask = "no such task"
	// qemu-server's vm_start on a running VM (API2/Qemu.pm, in the task).
	msgAlreadyRunning = "VM %d already running"
)

// writeError writes e. net/http cannot send a reason phrase of its own, so the connection is
// hijacked and the response written by hand, then closed (Connection: close): the client
// must see the text in resp.Status, as it would from PVE.
func writeError(w http.ResponseWriter, e *apiError) {
	var body []byte
	if !e.emptyBody {
		doc := map[string]any{"data": nil, "message": e.message + "\n"}
		if e.errs != nil {
			doc["errors"] = e.errs
		}
		body, _ = json.Marshal(doc)
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		// Not reachable with the HTTP/1.1 server the simulator runs; keep the body at least.
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.WriteHeader(e.status)
		_, _ = w.Write(body)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	writeRaw(rw.Writer, e.status, reasonPhrase(e.message), body)
	_ = rw.Flush()
	lingeringClose(conn)
}

// lingerBudget bounds how long an error answer waits for the client to finish sending.
const lingerBudget = 2 * time.Second

// lingeringClose half-closes conn and reads what the client still sends (a request body the
// handler did not read, e.g. an upload refused at authentication) before closing: closing
// with unread data would reset the connection and could destroy the answer before the
// client reads it.
func lingeringClose(conn net.Conn) {
	defer conn.Close()
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(lingerBudget))
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 2*maxUpload))
}

func writeRaw(bw *bufio.Writer, status int, reason string, body []byte) {
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\n", status, reason)
	bw.WriteString("Cache-Control: max-age=0\r\n")
	bw.WriteString("Connection: close\r\n")
	bw.WriteString("Date: " + time.Now().UTC().Format(http.TimeFormat) + "\r\n")
	bw.WriteString("Pragma: no-cache\r\n")
	bw.WriteString("Server: pve-api-daemon/3.0\r\n")
	if len(body) > 0 {
		bw.WriteString("Content-Type: application/json;charset=UTF-8\r\n")
	}
	bw.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	bw.Write(body)
}

// reasonPhrase is the message made safe for a status line: one line, printable.
func reasonPhrase(msg string) string {
	msg = strings.TrimRight(msg, "\r\n")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
}

// writeData writes the {"data": …} envelope every successful answer has.
func writeData(w http.ResponseWriter, data any) {
	b, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		writeError(w, errorf(http.StatusInternalServerError, "%v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.Header().Set("Cache-Control", "max-age=0")
	w.Header().Set("Pragma", "no-cache")
	w.Header().Set("Server", "pve-api-daemon/3.0")
	_, _ = w.Write(b)
}
