package kvstoretest

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartCluster starts n embedded JetStream servers named n1…nn, routed to each other on free
// loopback ports, and waits until JetStream has a meta leader. They are shut down when the
// test ends (Shutdown on one of them earlier is fine).
func StartCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	servers := make([]*server.Server, n)
	for i := range servers {
		opts := &server.Options{
			ServerName:         fmt.Sprintf("n%d", i+1),
			Host:               "127.0.0.1",
			Port:               -1,
			JetStream:          true,
			StoreDir:           t.TempDir(),
			JetStreamMaxMemory: 64 << 20,
			JetStreamMaxStore:  1 << 30,
			Cluster:            server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: ports[i]},
			Routes:             routes,
			NoLog:              true,
			NoSigs:             true,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("nats-server %s: %v", opts.ServerName, err)
		}
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		servers[i] = s
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("%s not ready within 10s", s.Name())
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return servers
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no JetStream meta leader within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
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
