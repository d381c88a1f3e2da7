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

	"github.com/egressd/egressd/internal/relay"
)

// gate is the one address at which a cluster server's peers reach it: it forwards the route
// connections it accepts to the server, and knows each by the server that dialled it (the ID in
// the route's first line, CONNECT {"name": ...}), so that a cut can close every connection of
// one server, in either direction. One address per server is what makes gossip harmless: a
// server tells its peers of a new one by that server's advertised address, the gate, and a
// peer that has the gate among its configured routes makes no route of its own to it.
type gate struct {
	addr string
	mu   sync.Mutex
	from map[string]*relay.Tunnels // the routes through the gate, by the dialling server's ID
	down bool                      // the server behind the gate is cut off: every route is refused
}

// Bounds of a route's way through a gate: how long it waits for the route's first line, and
// how long a route may stay silent (nats-server pings its routes every 2 minutes).
const (
	handshakeWait = 10 * time.Second
	routeIdle     = time.Hour
)

// routes are the routes dialled through the gate by the server with ID src: closed, and
// refusing new ones, once that server or the gate's is cut off.
func (g *gate) routes(src string) *relay.Tunnels {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.from[src]
	if ts == nil {
		ts = relay.NewTunnels()
		g.from[src] = ts
		if g.down {
			ts.CloseAll()
		}
	}
	return ts
}

// cutAll closes every route through the gate and refuses new ones.
func (g *gate) cutAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = true
	for _, ts := range g.from {
		ts.CloseAll()
	}
}

// cutFrom closes the routes the server with ID id dialled through the gate and refuses its
// new ones.
func (g *gate) cutFrom(id string) { g.routes(id).CloseAll() }

func startGate(t testing.TB, target string) *gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{addr: l.Addr().String(), from: map[string]*relay.Tunnels{}}
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
	ts := g.routes(src)
	if !ts.Track(in, out) {
		in.Close()
		out.Close()
		return
	}
	defer ts.Untrack(in, out)
	// The first line, and whatever came with it (the route's INFO), go on before the splice.
	_, err = io.WriteString(out, first)
	if err == nil {
		_, err = io.CopyN(out, br, int64(br.Buffered()))
	}
	if err != nil {
		in.Close()
		out.Close()
		return
	}
	relay.Splice(in, out, routeIdle)
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
