package prober

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// startLeakyProxy runs a careless forward proxy on 127.0.0.4: it accepts any CONNECT, then
// reads the plain HTTP request inside the tunnel and forwards it with extra headers added,
// and with the client's Proxy-Authorization when forwardAuth is set. It returns its address.
func startLeakyProxy(t *testing.T, extra map[string]string, forwardAuth bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.4:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { leak(c, extra, forwardAuth) })
		}
	})
	return ln.Addr().String()
}

func leak(c net.Conn, extra map[string]string, forwardAuth bool) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	connect, err := http.ReadRequest(br)
	if err != nil || connect.Method != http.MethodConnect {
		return
	}
	up, err := net.DialTimeout("tcp", connect.Host, 5*time.Second)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	up.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	inner, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	for k, v := range extra {
		inner.Header.Set(k, v)
	}
	if forwardAuth {
		inner.Header.Set("Proxy-Authorization", connect.Header.Get("Proxy-Authorization"))
	}
	if inner.Write(up) != nil {
		return
	}
	io.Copy(c, up)
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// blackHole accepts connections and never answers. It returns its address.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.6:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	return ln.Addr().String()
}

func statusHandler(code int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code/100 == 3 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
	})
}

// switchable is a forward proxy that can be made to hang: while slow, it accepts connections
// and never answers them (a probe through it runs into its timeout); once fast, it serves.
type switchable struct {
	net.Listener
	slow atomic.Bool
	mu   sync.Mutex
	held []net.Conn
}

func (s *switchable) Accept() (net.Conn, error) {
	for {
		c, err := s.Listener.Accept()
		if err != nil || !s.slow.Load() {
			return c, err
		}
		s.mu.Lock()
		s.held = append(s.held, c)
		s.mu.Unlock()
	}
}

func (s *switchable) Close() error {
	s.mu.Lock()
	for _, c := range s.held {
		c.Close()
	}
	s.mu.Unlock()
	return s.Listener.Close()
}

// startSwitchable runs egressd's forward proxy behind a switchable listener on addr.
func startSwitchable(t *testing.T, addr string) (*switchable, string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &switchable{Listener: ln}
	s.slow.Store(true)
	serve(t, func(ctx context.Context) error { return forwardproxy.Serve(ctx, s, forwardproxy.Config{}) })
	return s, ln.Addr().String()
}
