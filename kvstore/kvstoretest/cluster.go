package kvstoretest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is n embedded JetStream servers named n1…nn whose routes each go through a
// loopback gate in front of the server they reach, so that a test can cut a server off as
// kill -9 would: its connections to its peers close at once, and it does nothing about its
// Raft groups. (A Shutdown is no crash: a server that shuts down hands its
// leaderships over, and a new leader is there within milliseconds.)
type Cluster struct {
	Servers []*server.Server
	gates   []*gate // gates[i] is where the peers of server i reach it
}

// routeWait bounds how long CutOff waits for every server to see a cut.
const routeWait = 30 * time.Second

// StartCluster starts the cluster and waits until JetStream has a meta leader that knows
// every server as a peer and every server is current with it (before that, an R3 stream may
// not be placed). Everything is shut down when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	c := &Cluster{Servers: make([]*server.Server, n), gates: make([]*gate, n)}
	for i := range n {
		c.gates[i] = startGate(t, fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	for i := range n {
		var routes []*url.URL
		for to, g := range c.gates {
			if to != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: g.addr})
			}
		}
		opts := &server.Options{
			ServerName:         fmt.Sprintf("n%d", i+1),
			Host:               "127.0.0.1",
			Port:               -1,
			JetStream:          true,
			StoreDir:           t.TempDir(),
			JetStreamMaxMemory: 64 << 20,
			JetStreamMaxStore:  1 << 30,
			// Peers hear of the server at its gate, a configured route of theirs: so gossip
			// never makes a route of its own, past the gates.
			Cluster: server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: ports[i], NoAdvertise: true, Advertise: c.gates[i].addr},
			Routes:  routes,
			NoLog:   true,
			NoSigs:  true,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("nats-server %s: %v", opts.ServerName, err)
		}
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		c.Servers[i] = s
	}
	for _, s := range c.Servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("%s not ready within 10s", s.Name())
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for !c.ready() {
		if time.Now().After(deadline) {
			t.Fatal("JetStream cluster not ready within 60s (a meta leader with every peer, every server current)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.waitPlacement(t, deadline)
	if bypass := c.bypasses(); bypass != "" {
		t.Fatalf("a route past the gates: %s", bypass)
	}
	return c
}

// bypasses names a route that a server solicited to an address it was not configured with
// (gossip's: it would not go through a gate), or is empty.
func (c *Cluster) bypasses() string {
	for _, s := range c.Servers {
		rz, err := s.Routez(&server.RoutezOptions{})
		if err != nil {
			return fmt.Sprintf("%s: routez: %v", s.Name(), err)
		}
		for _, r := range rz.Routes {
			if r.DidSolicit && !r.IsConfigured {
				return fmt.Sprintf("%s to %s at %s:%d", s.Name(), r.RemoteName, r.IP, r.Port)
			}
		}
	}
	return ""
}

// waitPlacement creates and deletes a stream on every server until that works: the meta
// leader may count a peer offline for a moment after it has joined ("no suitable peers for
// placement").
func (c *Cluster) waitPlacement(t testing.TB, deadline time.Time) {
	t.Helper()
	nc, err := nats.Connect(c.Servers[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "kvstoretest_placement", Subjects: []string{"kvstoretest.placement"},
			Storage: jetstream.MemoryStorage, Replicas: len(c.Servers)})
		if err == nil {
			err = js.DeleteStream(ctx, "kvstoretest_placement")
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster cannot place a stream on %d servers: %v", len(c.Servers), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) ready() bool {
	leader := false
	for _, s := range c.Servers {
		if !s.JetStreamIsCurrent() {
			return false
		}
		if s.JetStreamIsLeader() {
			leader = len(s.JetStreamClusterPeers()) == len(c.Servers)
		}
	}
	return leader
}

// CutOff closes every connection between server i and its peers and refuses new ones, as
// the kernel does for a process killed with SIGKILL: the peers lose its routes at once, and
// its Raft groups learn of no leader change but by their election timeouts. Server i keeps
// running, alone; its client connections stay (a test connects its clients elsewhere).
//
// It returns once every server has seen the cut (server i has no route left, and no peer a
// route to it), so that what a test does next happens after the crash it stands for.
func (c *Cluster) CutOff(t testing.TB, i int) {
	t.Helper()
	c.gates[i].cutAll()
	for j, g := range c.gates {
		if j != i {
			g.cutFrom(c.Servers[i].ID()) // the ID that names it at the gates
		}
	}
	victim := c.Servers[i].Name()
	for deadline := time.Now().Add(routeWait); ; time.Sleep(5 * time.Millisecond) {
		left := c.routesTo(victim)
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s cut off, but routes stay up after %v: %s", victim, routeWait, left)
		}
	}
}

// routesTo names a route that still joins the server named victim to a peer, or is empty.
func (c *Cluster) routesTo(victim string) string {
	for _, s := range c.Servers {
		rz, err := s.Routez(&server.RoutezOptions{})
		if err != nil {
			return fmt.Sprintf("%s: routez: %v", s.Name(), err)
		}
		for _, r := range rz.Routes {
			if s.Name() == victim || r.RemoteName == victim {
				return fmt.Sprintf("%s to %s at %s:%d", s.Name(), r.RemoteName, r.IP, r.Port)
			}
		}
	}
	return ""
}

// freePort is a loopback TCP port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
