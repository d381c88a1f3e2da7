package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// agentVersion is what guest-info reports.
const agentVersion = "egressd-test-agent-1"

// maxRequest bounds one request; the host never sends anything near it.
const maxRequest = 64 << 10

// maxFileRead bounds one guest-file-read, as qemu-ga does (48 MiB there; far less here).
const maxFileRead = 1 << 20

// agent answers the QEMU guest agent protocol: newline-free JSON objects in, one JSON object
// per line out. The host may send 0xFF at any time to make the agent drop a half-read request
// (after a timeout, before guest-sync-delimited); the agent then answers guest-sync-delimited
// with 0xFF before the reply so the host can skip whatever was in flight.
type agent struct {
	hostname   func() (string, error)
	interfaces func() ([]iface, error)
	shutdown   func(mode string) // runs after the (absent) reply; never returns in a real guest

	mu    sync.Mutex
	files map[int64]*os.File
	next  int64
}

// iface is one network interface as guest-network-get-interfaces reports it.
type iface struct {
	Name string         `json:"name"`
	MAC  string         `json:"hardware-address,omitempty"`
	IPs  []ifaceAddress `json:"ip-addresses"`
}

type ifaceAddress struct {
	Type   string `json:"ip-address-type"` // ipv4 or ipv6
	Addr   string `json:"ip-address"`
	Prefix int    `json:"prefix"`
}

// request is one command from the host.
type request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id,omitempty"`
}

// qgaError is the error object of a reply; Class follows QEMU's error classes.
type qgaError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *qgaError) Error() string { return e.Class + ": " + e.Desc }

func genericError(format string, args ...any) error {
	return &qgaError{Class: "GenericError", Desc: fmt.Sprintf(format, args...)}
}

// errNoReply is returned by a command that, like qemu-ga's guest-shutdown, sends nothing back.
var errNoReply = errors.New("no reply")

// commands lists what this agent supports, for guest-info and dispatch.
var commands = []string{
	"guest-sync", "guest-sync-delimited", "guest-ping", "guest-info",
	"guest-network-get-interfaces", "guest-get-host-name", "guest-shutdown",
	"guest-file-open", "guest-file-read", "guest-file-close",
}

// serve answers requests read from rw until it fails or ends. Each reply is written whole,
// terminated by a newline.
func (a *agent) serve(rw io.ReadWriter) error {
	r := bufio.NewReader(rw)
	for {
		raw, err := readRequest(r)
		if err != nil {
			return err
		}
		var req request
		var reply any
		var delimited bool
		var after func()
		if err := json.Unmarshal(raw, &req); err != nil || req.Execute == "" {
			reply = map[string]any{"error": qgaError{Class: "GenericError", Desc: "invalid request: want {\"execute\": ...}"}}
		} else {
			delimited = req.Execute == "guest-sync-delimited"
			ret, runAfter, err := a.dispatch(req)
			after = runAfter
			switch {
			case errors.Is(err, errNoReply):
				reply = nil
			case err != nil:
				var qe *qgaError
				if !errors.As(err, &qe) {
					qe = &qgaError{Class: "GenericError", Desc: err.Error()}
				}
				reply = withID(map[string]any{"error": qe}, req.ID)
			default:
				reply = withID(map[string]any{"return": ret}, req.ID)
			}
		}
		if reply != nil {
			b, err := json.Marshal(reply)
			if err != nil {
				return err
			}
			if delimited {
				b = append([]byte{0xff}, b...)
			}
			if _, err := rw.Write(append(b, '\n')); err != nil {
				return err
			}
		}
		if after != nil {
			after()
		}
	}
}

func withID(m map[string]any, id json.RawMessage) map[string]any {
	if len(id) > 0 {
		m["id"] = id
	}
	return m
}

// readRequest returns the next complete JSON object from r. A 0xFF byte discards whatever was
// read so far; bytes outside an object (whitespace, stray garbage) are skipped. Strings are
// tracked so that braces inside them do not count.
func readRequest(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	depth := 0
	inString, escaped := false, false
	for {
		c, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		if c == 0xff { // the host's resynchronisation marker
			buf, depth, inString, escaped = buf[:0], 0, false, false
			continue
		}
		if depth == 0 && c != '{' {
			continue // between requests
		}
		buf = append(buf, c)
		if len(buf) > maxRequest {
			return nil, fmt.Errorf("request longer than %d bytes", maxRequest)
		}
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return buf, nil
			}
		}
	}
}

// dispatch runs one command. after, when set, runs once the reply (if any) is written.
func (a *agent) dispatch(req request) (ret any, after func(), err error) {
	args := req.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	switch req.Execute {
	case "guest-sync", "guest-sync-delimited":
		// The host picks a random id and waits for it to come back; that is how it knows the
		// next line is the reply to its next command, not a stale one.
		var a struct {
			ID *json.Number `json:"id"`
		}
		if err := json.Unmarshal(args, &a); err != nil || a.ID == nil {
			return nil, nil, genericError("%s: the integer argument id is required", req.Execute)
		}
		return a.ID, nil, nil
	case "guest-ping":
		return struct{}{}, nil, nil
	case "guest-info":
		type cmd struct {
			Name            string `json:"name"`
			Enabled         bool   `json:"enabled"`
			SuccessResponse bool   `json:"success-response"`
		}
		var cmds []cmd
		for _, c := range commands {
			cmds = append(cmds, cmd{Name: c, Enabled: true, SuccessResponse: c != "guest-shutdown"})
		}
		return map[string]any{"version": agentVersion, "supported_commands": cmds}, nil, nil
	case "guest-get-host-name":
		h, err := a.hostname()
		if err != nil {
			return nil, nil, genericError("hostname: %v", err)
		}
		return map[string]string{"host-name": h}, nil, nil
	case "guest-network-get-interfaces":
		ifs, err := a.interfaces()
		if err != nil {
			return nil, nil, genericError("interfaces: %v", err)
		}
		return ifs, nil, nil
	case "guest-shutdown":
		var a2 struct {
			Mode string `json:"mode"`
		}
		_ = json.Unmarshal(args, &a2)
		switch a2.Mode {
		case "":
			a2.Mode = "powerdown"
		case "powerdown", "halt", "reboot":
		default:
			return nil, nil, genericError("guest-shutdown: unknown mode %q", a2.Mode)
		}
		// Like qemu-ga, no reply: the host treats the guest going away as success.
		return nil, func() { a.shutdown(a2.Mode) }, errNoReply
	case "guest-file-open":
		return a.fileOpen(args)
	case "guest-file-read":
		return a.fileRead(args)
	case "guest-file-close":
		return a.fileClose(args)
	}
	return nil, nil, &qgaError{Class: "CommandNotFound", Desc: fmt.Sprintf("The command %s has not been found", req.Execute)}
}

// The guest-file commands are read-only here: they let a test read a file the guest wrote
// (its boot timeline) with `virsh qemu-agent-command`, nothing more.

func (a *agent) fileOpen(args json.RawMessage) (any, func(), error) {
	var p struct {
		Path string `json:"path"`
		Mode string `json:"mode"`
	}
	if err := json.Unmarshal(args, &p); err != nil || p.Path == "" {
		return nil, nil, genericError("guest-file-open: the argument path is required")
	}
	if p.Mode != "" && p.Mode != "r" && p.Mode != "rb" {
		return nil, nil, genericError("guest-file-open: this agent only reads (mode %q)", p.Mode)
	}
	f, err := os.Open(p.Path)
	if err != nil {
		return nil, nil, genericError("guest-file-open: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.files == nil {
		a.files = map[int64]*os.File{}
	}
	a.next++
	a.files[a.next] = f
	return a.next, nil, nil
}

func (a *agent) file(args json.RawMessage, cmd string) (*os.File, int64, int, error) {
	var p struct {
		Handle *int64 `json:"handle"`
		Count  *int   `json:"count"`
	}
	if err := json.Unmarshal(args, &p); err != nil || p.Handle == nil {
		return nil, 0, 0, genericError("%s: the integer argument handle is required", cmd)
	}
	a.mu.Lock()
	f := a.files[*p.Handle]
	a.mu.Unlock()
	if f == nil {
		return nil, 0, 0, genericError("%s: handle %d is not open", cmd, *p.Handle)
	}
	count := 4096 // qemu-ga's default
	if p.Count != nil {
		count = *p.Count
	}
	if count < 0 || count > maxFileRead {
		return nil, 0, 0, genericError("%s: count %d is out of range", cmd, count)
	}
	return f, *p.Handle, count, nil
}

func (a *agent) fileRead(args json.RawMessage) (any, func(), error) {
	f, _, count, err := a.file(args, "guest-file-read")
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, count)
	n, err := io.ReadFull(f, buf)
	eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	if err != nil && !eof {
		return nil, nil, genericError("guest-file-read: %v", err)
	}
	return map[string]any{"count": n, "buf-b64": base64.StdEncoding.EncodeToString(buf[:n]), "eof": eof}, nil, nil
}

func (a *agent) fileClose(args json.RawMessage) (any, func(), error) {
	f, h, _, err := a.file(args, "guest-file-close")
	if err != nil {
		return nil, nil, err
	}
	a.mu.Lock()
	delete(a.files, h)
	a.mu.Unlock()
	f.Close()
	return struct{}{}, nil, nil
}

// closeFiles closes every handle; the host's view of them ends with the connection.
func (a *agent) closeFiles() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for h, f := range a.files {
		f.Close()
		delete(a.files, h)
	}
}

// systemInterfaces reads the guest's interfaces and addresses from the kernel.
func systemInterfaces() ([]iface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := []iface{}
	for _, ifc := range ifs {
		e := iface{Name: ifc.Name, MAC: ifc.HardwareAddr.String(), IPs: []ifaceAddress{}}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, err
		}
		for _, ad := range addrs {
			ipn, ok := ad.(*net.IPNet)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			t := "ipv6"
			if ipn.IP.To4() != nil {
				t = "ipv4"
			}
			e.IPs = append(e.IPs, ifaceAddress{Type: t, Addr: ipn.IP.String(), Prefix: ones})
		}
		out = append(out, e)
	}
	return out, nil
}
