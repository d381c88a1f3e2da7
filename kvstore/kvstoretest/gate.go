package kvstoretest

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// gate is the one address at which a cluster server's peers reach it: it forwards the route
// connections it accepts to the server, and knows each by the server that dialled it (the ID in
// the route's first line, CONNECT {"name": ...}), so that a cut can close every connection of
// one server, in either direction. One address per server is what makes gossip harmless: a
// server tells its peers of a new one by that server's advertised address, the gate, and a
// peer that has the gate among its configured routes makes no route of its own to it.
type gate struct {
	addr  string
	mu    sync.Mutex
	conns map[net.Conn]string // each accepted connection (both ends), by the dialling server's ID
	from  map[string]bool     // servers whose connections are refused
	down  bool                // the server behind the gate is cut off: every connection is refused
}

// handshakeWait bounds how long a gate waits for a route's first line.
const handshakeWait = 10 * time.Second

// cutAll closes every connection through the gate and refuses new ones.
func (g *gate) cutAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = true
	for c := range g.conns {
		c.Close()
	}
	clear(g.conns)
}

// cutFrom closes the connections the server with ID id dialled through the gate and refuses
// its new ones.
func (g *gate) cutFrom(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.from[id] = true
	for c, src := range g.conns {
		if src == id {
			c.Close()
			delete(g.conns, c)
		}
	}
}

// admit keeps both ends of a connection from src for the cuts; false (both closed) when src
// or the gate is cut.
func (g *gate) admit(src string, in, out net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down || g.from[src] {
		in.Close()
		out.Close()
		return false
	}
	g.conns[in], g.conns[out] = src, src
	return true
}

func startGate(t testing.TB, target string) *gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{addr: l.Addr().String(), conns: map[net.Conn]string{}, from: map[string]bool{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { g.serve(in, target) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		g.cutAll()
		wg.Wait()
	})
	return g
}

// serve reads a route's first line to learn who dialled, then joins it to the server.
func (g *gate) serve(in net.Conn, target string) {
	_ = in.SetReadDeadline(time.Now().Add(handshakeWait))
	br := bufio.NewReader(in)
	first, err := br.ReadString('\n')
	_ = in.SetReadDeadline(time.Time{})
	src, ok := routeSource(first)
	if err != nil || !ok {
		in.Close()
		return
	}
	out, err := net.Dial("tcp", target)
	if err != nil {
		in.Close()
		return
	}
	if !g.admit(src, in, out) {
		return
	}
	if _, err := io.WriteString(out, first); err != nil {
		in.Close()
		out.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { pipe(out, br, in) })
	wg.Go(func() { pipe(in, out, out) })
	wg.Wait()
}

// routeSource is the server ID a route's CONNECT line names.
func routeSource(line string) (string, bool) {
	body, ok := strings.CutPrefix(strings.TrimSpace(line), "CONNECT ")
	if !ok {
		return "", false
	}
	var c struct {
		Name string `json:"name"`
	}
	if json.Unmarshal([]byte(body), &c) != nil || c.Name == "" {
		return "", false
	}
	return c.Name, true
}

// pipe copies src to dst until either closes, then closes both (srcConn is src's connection).
func pipe(dst net.Conn, src io.Reader, srcConn net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	srcConn.Close()
}
