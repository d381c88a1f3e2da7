package prober

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// startLeakyProxy runs a careless forward proxy on 127.0.0.4: it accepts any CONNECT, then
// reads the plain HTTP request inside the tunnel and forwards it with extra headers added,
// and with the client's Proxy-Authorization when forwardAuth is set; plain-HTTP requests it
// forwards the same way. "{client}" in a header value is the client's address as the proxy
// sees it; a name prefixed "forward:" is added to plain-HTTP requests only (a real proxy
// cannot touch what goes through a tunnel). It returns its address.
func startLeakyProxy(t *testing.T, extra map[string]string, forwardAuth bool) string {
	t.Helper()
	addr, _ := startSwitchableLeaky(t, extra, forwardAuth)
	return addr
}

// startSwitchableLeaky is startLeakyProxy with a function that replaces the extra headers
// for the requests that follow.
func startSwitchableLeaky(t *testing.T, extra map[string]string, forwardAuth bool) (string, func(map[string]string)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.4:0")
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[map[string]string]
	current.Store(&extra)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { leak(c, *current.Load(), forwardAuth) })
		}
	})
	return ln.Addr().String(), func(m map[string]string) { current.Store(&m) }
}

func leak(c net.Conn, extra map[string]string, forwardAuth bool) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	client, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	br := bufio.NewReader(c)
	first, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	inner, upstream := first, first.URL.Host
	if first.Method == http.MethodConnect {
		upstream = first.Host
	}
	up, err := net.DialTimeout("tcp", upstream, 5*time.Second)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	up.SetDeadline(time.Now().Add(5 * time.Second))
	if first.Method == http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		if inner, err = http.ReadRequest(br); err != nil {
			return
		}
	}
	for k, v := range extra {
		name, forwardOnly := strings.CutPrefix(k, "forward:")
		if !forwardOnly || first.Method != http.MethodConnect {
			inner.Header.Set(name, strings.ReplaceAll(v, "{client}", client))
		}
	}
	if forwardAuth {
		inner.Header.Set("Proxy-Authorization", first.Header.Get("Proxy-Authorization"))
	} else {
		inner.Header.Del("Proxy-Authorization")
	}
	if inner.Write(up) != nil { // origin form, as a proxy forwards it
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
