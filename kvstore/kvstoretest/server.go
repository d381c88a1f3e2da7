// Package kvstoretest runs a real nats-server with JetStream in-process for tests: a random
// loopback port, a temporary store directory, shut down when the test ends.
package kvstoretest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StartServer starts an embedded JetStream server on 127.0.0.1 with a random port.
func StartServer(t testing.TB) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName:         "test",
		Host:               "127.0.0.1",
		Port:               -1,
		JetStream:          true,
		StoreDir:           t.TempDir(),
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  4 << 30,
		NoLog:              true,
		NoSigs:             true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready within 10s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// Connect opens a client connection to s, closed when the test ends.
func Connect(t testing.TB, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// Start starts a server and connects to it.
func Start(t testing.TB) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := StartServer(t)
	nc, js := Connect(t, s)
	return s, nc, js
}
