package relay

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestRemoveHeaders(t *testing.T) {
	h := http.Header{"Connection": {"X-Hop, keep-alive"}, "X-Hop": {"1"}, "Keep-Alive": {"5"}, "Proxy-Authorization": {"Basic x"},
		"Proxy-Egressd-Hint": {"y"}, "Te": {"trailers"}, "Accept": {"*/*"}, "Proxy": {"not a Proxy-* header"}}
	RemoveHopHeaders(h)
	RemoveProxyHeaders(h)
	if len(h) != 2 || h.Get("Accept") != "*/*" || h.Get("Proxy") == "" {
		t.Errorf("left %v, want Accept and Proxy", h)
	}
}

// tcpPair is two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// Splice relays both ways, passes a half-close on (the answer still arrives after the client
// stopped sending) and counts each direction.
func TestSpliceHalfClose(t *testing.T) {
	client, clientSide := tcpPair(t)
	upSide, up := tcpPair(t)
	done := make(chan [2]int64, 1)
	go func() { s, r := Splice(clientSide, upSide, time.Minute); done <- [2]int64{s, r} }()
	if _, err := client.Write([]byte("ping!")); err != nil {
		t.Fatal(err)
	}
	CloseWrite(client)
	got, err := io.ReadAll(up)
	if err != nil || string(got) != "ping!" {
		t.Fatalf("upstream read %q, %v", got, err)
	}
	if _, err := up.Write([]byte("pong, late")); err != nil {
		t.Fatal(err)
	}
	CloseWrite(up)
	back, err := io.ReadAll(client)
	if err != nil || string(back) != "pong, late" {
		t.Fatalf("client read %q, %v", back, err)
	}
	if n := <-done; n != [2]int64{5, 10} {
		t.Errorf("Splice counted %v, want [5 10]", n)
	}
}

// A transfer larger than the small buffer arrives intact after the buffer grows.
func TestSpliceGrowsItsBuffer(t *testing.T) {
	client, clientSide := tcpPair(t)
	upSide, up := tcpPair(t)
	go Splice(clientSide, upSide, time.Minute)
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	go func() { _, _ = up.Write(data); CloseWrite(up) }()
	CloseWrite(client)
	got, err := io.ReadAll(client)
	if err != nil || string(got) != string(data) {
		t.Fatalf("read %d bytes (%v), want the %d sent, intact", len(got), err, len(data))
	}
}

// A reset on either side ends the tunnel at once, though the other side is quiet and the idle
// cut an hour away: the side blocked in a read is closed under it.
func TestSpliceEndsOnAReset(t *testing.T) {
	for _, side := range []string{"client", "upstream"} {
		t.Run(side, func(t *testing.T) {
			client, clientSide := tcpPair(t)
			upSide, up := tcpPair(t)
			done := make(chan struct{})
			go func() { defer close(done); Splice(clientSide, upSide, time.Hour) }()
			reset := client
			if side == "upstream" {
				reset = up
			}
			_ = reset.(*net.TCPConn).SetLinger(0)
			reset.Close()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("a reset %s left the tunnel open", side)
			}
		})
	}
}
