package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// host is the libvirt side of the virtio-serial port, over a net.Pipe.
type host struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func startAgent(t *testing.T, a *agent) *host {
	t.Helper()
	hostSide, guestSide := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- a.serve(guestSide) }()
	t.Cleanup(func() {
		hostSide.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("serve did not return after the host closed the port")
		}
	})
	return &host{t: t, conn: hostSide, r: bufio.NewReader(hostSide)}
}

func (h *host) send(s string) {
	h.t.Helper()
	_ = h.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := h.conn.Write([]byte(s)); err != nil {
		h.t.Fatalf("write %q: %v", s, err)
	}
}

// reply reads one reply line and decodes it.
func (h *host) reply() map[string]json.RawMessage {
	h.t.Helper()
	_ = h.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := h.r.ReadBytes('\n')
	if err != nil {
		h.t.Fatalf("read reply: %v (got %q)", err, line)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimPrefix(line, []byte{0xff}), &m); err != nil {
		h.t.Fatalf("reply %q is not a JSON object: %v", line, err)
	}
	return m
}

func (h *host) call(req string) json.RawMessage {
	h.t.Helper()
	h.send(req)
	m := h.reply()
	if e, ok := m["error"]; ok {
		h.t.Fatalf("%s: error %s", req, e)
	}
	return m["return"]
}

func testAgent() *agent {
	return &agent{
		hostname: func() (string, error) { return "egress-abc", nil },
		interfaces: func() ([]iface, error) {
			return []iface{
				{Name: "lo", IPs: []ifaceAddress{{Type: "ipv4", Addr: "127.0.0.1", Prefix: 8}}},
				{Name: "eth0", MAC: "52:54:00:12:34:56", IPs: []ifaceAddress{{Type: "ipv4", Addr: "192.168.124.17", Prefix: 24}}},
			}, nil
		},
		shutdown: func(string) {},
	}
}

func TestSyncAndPing(t *testing.T) {
	h := startAgent(t, testAgent())
	if got := h.call(`{"execute":"guest-sync","arguments":{"id":1234567890123}}`); string(got) != "1234567890123" {
		t.Fatalf("guest-sync returned %s", got)
	}
	if got := h.call(`{"execute":"guest-ping"}`); string(got) != "{}" {
		t.Fatalf("guest-ping returned %s", got)
	}
	// A request id is echoed, as qemu-ga does.
	h.send(`{"execute":"guest-ping","id":"abc"}`)
	if m := h.reply(); string(m["id"]) != `"abc"` {
		t.Fatalf("id not echoed: %v", m)
	}
}

// The host sends 0xFF to drop a half-sent request, then guest-sync-delimited, and skips
// everything up to the 0xFF that starts the reply.
func TestResyncAfterGarbage(t *testing.T) {
	h := startAgent(t, testAgent())
	h.send(`{"execute":"guest-ping", "argum`) // cut off, as after a host-side timeout
	h.send("\xff")
	h.send("{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":42}}\n")
	_ = h.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := h.r.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	if len(line) == 0 || line[0] != 0xff {
		t.Fatalf("guest-sync-delimited reply does not start with 0xFF: %q", line)
	}
	if !bytes.Contains(line, []byte(`"return":42`)) {
		t.Fatalf("guest-sync-delimited reply: %q", line)
	}
	// Braces inside strings do not confuse the framing.
	if got := h.call(`{"execute":"guest-sync","arguments":{"id":7},"x":"}{\"}"}`); string(got) != "7" {
		t.Fatalf("a request with braces in a string: %s", got)
	}
}

func TestInfoHostNameInterfaces(t *testing.T) {
	h := startAgent(t, testAgent())
	var info struct {
		Version  string `json:"version"`
		Commands []struct {
			Name            string `json:"name"`
			Enabled         bool   `json:"enabled"`
			SuccessResponse bool   `json:"success-response"`
		} `json:"supported_commands"`
	}
	if err := json.Unmarshal(h.call(`{"execute":"guest-info"}`), &info); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range info.Commands {
		names[c.Name] = c.SuccessResponse
	}
	for _, c := range []string{"guest-sync", "guest-sync-delimited", "guest-ping", "guest-network-get-interfaces", "guest-get-host-name"} {
		if !names[c] {
			t.Errorf("guest-info lacks %s (or says it has no success response)", c)
		}
	}
	if sr, ok := names["guest-shutdown"]; !ok || sr {
		t.Errorf("guest-shutdown: listed %v, success-response %v; want listed without a response", ok, sr)
	}
	if got := h.call(`{"execute":"guest-get-host-name"}`); string(got) != `{"host-name":"egress-abc"}` {
		t.Fatalf("guest-get-host-name returned %s", got)
	}
	// The shape libvirt parses for `virsh domifaddr --source agent`.
	var ifs []struct {
		Name string `json:"name"`
		MAC  string `json:"hardware-address"`
		IPs  []struct {
			Type   string `json:"ip-address-type"`
			Addr   string `json:"ip-address"`
			Prefix int    `json:"prefix"`
		} `json:"ip-addresses"`
	}
	if err := json.Unmarshal(h.call(`{"execute":"guest-network-get-interfaces"}`), &ifs); err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 2 || ifs[1].Name != "eth0" || ifs[1].MAC != "52:54:00:12:34:56" ||
		len(ifs[1].IPs) != 1 || ifs[1].IPs[0].Addr != "192.168.124.17" || ifs[1].IPs[0].Type != "ipv4" || ifs[1].IPs[0].Prefix != 24 {
		t.Fatalf("guest-network-get-interfaces: %+v", ifs)
	}
}

func TestErrors(t *testing.T) {
	h := startAgent(t, testAgent())
	for req, class := range map[string]string{
		`{"execute":"guest-exec","arguments":{"path":"/bin/sh"}}`: "CommandNotFound",
		`{"execute":"guest-sync"}`:                                "GenericError",
		`{"nothing":1}`:                                           "GenericError",
		`{"execute":"guest-file-open","arguments":{"path":"/etc/hostname","mode":"w"}}`: "GenericError",
		`{"execute":"guest-file-read","arguments":{"handle":99}}`:                       "GenericError",
	} {
		h.send(req)
		var e qgaError
		m := h.reply()
		if err := json.Unmarshal(m["error"], &e); err != nil || e.Class != class || e.Desc == "" {
			t.Errorf("%s: reply %v, want error class %s", req, m, class)
		}
	}
	// The agent is still in step after the errors.
	if got := h.call(`{"execute":"guest-sync","arguments":{"id":5}}`); string(got) != "5" {
		t.Fatalf("guest-sync after errors returned %s", got)
	}
}

func TestShutdownSendsNoReply(t *testing.T) {
	a := testAgent()
	modes := make(chan string, 1)
	a.shutdown = func(mode string) { modes <- mode }
	h := startAgent(t, a)
	h.send(`{"execute":"guest-shutdown","arguments":{"mode":"powerdown"}}`)
	select {
	case m := <-modes:
		if m != "powerdown" {
			t.Fatalf("shutdown mode %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("guest-shutdown did not shut down")
	}
	// The next line on the wire is the ping's reply: guest-shutdown wrote nothing.
	if got := h.call(`{"execute":"guest-ping"}`); string(got) != "{}" {
		t.Fatalf("the line after guest-shutdown is %s", got)
	}
}

func TestFileRead(t *testing.T) {
	content := strings.Repeat("init 1.82\nbound 4.07\n", 300) // more than one read
	p := filepath.Join(t.TempDir(), "boot-times")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startAgent(t, testAgent())
	req, _ := json.Marshal(map[string]any{"execute": "guest-file-open", "arguments": map[string]any{"path": p}})
	var handle int64
	if err := json.Unmarshal(h.call(string(req)), &handle); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for range 10 {
		var r struct {
			Count int    `json:"count"`
			Buf   string `json:"buf-b64"`
			EOF   bool   `json:"eof"`
		}
		req, _ := json.Marshal(map[string]any{"execute": "guest-file-read", "arguments": map[string]any{"handle": handle, "count": 4096}})
		if err := json.Unmarshal(h.call(string(req)), &r); err != nil {
			t.Fatal(err)
		}
		b, err := base64.StdEncoding.DecodeString(r.Buf)
		if err != nil || len(b) != r.Count {
			t.Fatalf("buf-b64 %q count %d: %v", r.Buf, r.Count, err)
		}
		got = append(got, b...)
		if r.EOF {
			break
		}
	}
	if string(got) != content {
		t.Fatalf("read %d bytes, want %d", len(got), len(content))
	}
	h.call(`{"execute":"guest-file-close","arguments":{"handle":` + jsonInt(handle) + `}}`)
	h.send(`{"execute":"guest-file-close","arguments":{"handle":` + jsonInt(handle) + `}}`)
	if m := h.reply(); m["error"] == nil {
		t.Fatalf("closing a closed handle: %v", m)
	}
}

func jsonInt(i int64) string { b, _ := json.Marshal(i); return string(b) }

// A request larger than any the host sends ends serve with an error instead of growing memory.
func TestOversizedRequest(t *testing.T) {
	hostSide, guestSide := net.Pipe()
	defer hostSide.Close()
	done := make(chan error, 1)
	go func() { done <- testAgent().serve(guestSide) }()
	go func() { _, _ = hostSide.Write([]byte(`{"execute":"` + strings.Repeat("x", maxRequest+10))) }()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, net.ErrClosed) {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve kept reading an oversized request")
	}
}
