package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The start binds every address of its own before it opens the store or connects to NATS,
// so a busy one ends it at once, naming its flag, what holds the address where that can be
// told, and the way out, instead of after the store's recovery and a 30 s wait.

// listeners are the run's HTTP addresses, bound early; nil where not wanted.
type listeners struct{ metrics, ui, pprof, echo net.Listener }

// bindListeners binds the addresses f asks for; on an error nothing stays bound.
func bindListeners(f runFlags, roles roleSet) (_ *listeners, err error) {
	ls := &listeners{}
	defer func() {
		if err != nil {
			ls.close()
		}
	}()
	if f.metrics != "" {
		if ls.metrics, err = listen("--metrics-listen", f.metrics); err != nil {
			return nil, err
		}
	}
	if f.uiListen != "" && f.natsURL == "" {
		if ls.ui, err = listen("--ui-listen", f.uiListen); err != nil {
			return nil, err
		}
	}
	if f.pprof != "" {
		if ls.pprof, err = pprofListener(f.pprof); err != nil {
			return nil, err
		}
	}
	if roles.prober && f.checkURL == "" {
		if ls.echo, err = listen("--echo-listen", f.echoListen); err != nil {
			return nil, err
		}
	}
	return ls, nil
}

// close closes what is still open; a listener a server already closed says so, harmlessly.
func (ls *listeners) close() {
	for _, ln := range []net.Listener{ls.metrics, ls.ui, ls.pprof, ls.echo} {
		if ln != nil {
			ln.Close()
		}
	}
}

func listen(flagName, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenError(flagName, addr, err, func(bool) string { return "stop it, or pass another " + flagName })
	}
	return ln, nil
}

// checkNATSPort fails at once when the embedded server's client address is taken. It runs
// after the data directory is locked and before the store is opened: a server that cannot
// bind has no business recovering the store.
func checkNATSPort(addr string) error {
	if _, port, _ := net.SplitHostPort(addr); port == "-1" {
		return nil // nats-server's "any free port"
	}
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	return listenError("--nats-listen", addr, err, func(natsThere bool) string {
		another := "pass another --nats-listen and --data-dir"
		if natsThere {
			return fmt.Sprintf("to use the NATS server running there, pass --nats-url nats://%s; to run another embedded one, %s", addr, another)
		}
		return "stop it, or " + another
	})
}

// listenError says why addr cannot be bound: for a busy address, what holds it if that can
// be told, and the way out.
func listenError(flagName, addr string, err error, wayOut func(natsThere bool) string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s: %w", flagName, addr, err)
	}
	by := natsServerAt(addr)
	natsThere := by != ""
	if !natsThere {
		by = listenerProcess(addr)
	}
	if by != "" {
		by = " by " + by
	}
	return fmt.Errorf("%s %s: the address is in use%s (%w); %s", flagName, addr, by, err, wayOut(natsThere))
}

// natsServerAt describes the NATS server listening on addr from its INFO line, or "".
func natsServerAt(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	line, err := bufio.NewReaderSize(c, 4096).ReadString('\n')
	info, ok := strings.CutPrefix(line, "INFO ")
	if err != nil || !ok {
		return ""
	}
	var si struct {
		Name      string `json:"server_name"`
		Version   string `json:"version"`
		JetStream bool   `json:"jetstream"`
	}
	if json.Unmarshal([]byte(info), &si) != nil {
		return ""
	}
	js := ""
	if si.JetStream {
		js = ", JetStream on"
	}
	return fmt.Sprintf("a NATS server (name %q, version %s%s)", si.Name, si.Version, js)
}

// listenerProcess names the local process listening on addr's port, from /proc (Linux;
// only processes this user may inspect), or "".
func listenerProcess(addr string) string {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port == 0 {
		return ""
	}
	inodes := listeningInodes(port)
	if len(inodes) == 0 {
		return ""
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !inodes[link] {
			continue
		}
		pid := strings.Split(fd, "/")[2]
		comm, _ := os.ReadFile(filepath.Join("/proc", pid, "comm"))
		return fmt.Sprintf("pid %s (%s)", pid, strings.TrimSpace(string(comm)))
	}
	return ""
}

// listeningInodes are the socket inodes, as fd links name them, of the TCP listeners on
// port.
func listeningInodes(port int) map[string]bool {
	out := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode; 0A is LISTEN.
			if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				out["socket:["+f[9]+"]"] = true
			}
		}
	}
	return out
}
