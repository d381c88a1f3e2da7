package libvirt

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/libvirttest"
)

// gatedConn is a connection whose writes can be made to stall, as on a host that vanished
// without a FIN: Write blocks until the conn is closed.
type gatedConn struct {
	net.Conn
	mu      sync.Mutex
	stall   bool
	stalled chan struct{} // a send for each Write that stalls
	closed  chan struct{}
	once    sync.Once
}

func (g *gatedConn) Write(b []byte) (int, error) {
	g.mu.Lock()
	stall := g.stall
	g.mu.Unlock()
	if stall {
		select {
		case g.stalled <- struct{}{}:
		default: // nobody waits for it
		}
		<-g.closed
		return 0, net.ErrClosed
	}
	return g.Conn.Write(b)
}

func (g *gatedConn) Close() error {
	g.once.Do(func() { close(g.closed) })
	return g.Conn.Close()
}

func (g *gatedConn) setStall() {
	g.mu.Lock()
	g.stall = true
	g.mu.Unlock()
}

// mockDialer hands go-libvirt a connection to go-libvirt's own mock server.
type mockDialer struct {
	mock *libvirttest.MockLibvirt
	conn *gatedConn
}

func (d *mockDialer) Dial() (net.Conn, error) {
	c, err := d.mock.Dial()
	if err != nil {
		return nil, err
	}
	d.conn = &gatedConn{Conn: c, closed: make(chan struct{}), stalled: make(chan struct{}, 1)}
	return d.conn, nil
}

// mockConn is an rpcConn over go-libvirt's mock server, with short budgets.
func mockConn(t *testing.T, dedicated bool, budget time.Duration) (*rpcConn, *mockDialer) {
	t.Helper()
	d := &mockDialer{mock: libvirttest.New()}
	lv := golibvirt.NewWithDialer(d)
	if err := lv.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		t.Fatal(err)
	}
	l := &link{host: "mock", tcp: d.conn, lv: lv, dedicated: dedicated, dead: make(chan struct{}), log: slog.New(slog.DiscardHandler)}
	t.Cleanup(func() { l.kill("test over") })
	c := &rpcConn{l: l, lv: lv, log: l.log, rpc: budget, start: budget, upload: budget, xfer: budget}
	return c, d
}

// The adapter's calls, against go-libvirt's mock where it answers them.
func TestRPCConnAgainstTheMock(t *testing.T) {
	c, _ := mockConn(t, false, 5*time.Second)
	ctx := context.Background()
	if v, err := c.LibVersion(ctx); err != nil || v != 1003004 {
		t.Errorf("LibVersion = %d, %v", v, err)
	}
	pool, err := c.LookupPool(ctx, "default")
	if err != nil || pool.Name != "default" {
		t.Errorf("LookupPool = %+v, %v", pool, err)
	}
	if err := c.RefreshPool(ctx, pool); err != nil {
		t.Errorf("RefreshPool: %v", err)
	}
	dom, err := c.LookupDomain(ctx, "test")
	if err != nil || dom.Name != "test" {
		t.Errorf("LookupDomain = %+v, %v", dom, err)
	}
	if state, err := c.DomainState(ctx, dom); err != nil || state != golibvirt.DomainRunning {
		t.Errorf("DomainState = %v, %v", state, err)
	}
	if doms, err := c.ListDomains(ctx); err != nil || len(doms) == 0 {
		t.Errorf("ListDomains = %v, %v", doms, err)
	}
	if d, err := c.DefineDomain(ctx, "<domain/>"); err != nil || d.Name != "test" {
		t.Errorf("DefineDomain = %+v, %v", d, err)
	}
	for name, call := range map[string]func() error{
		"StartDomain":    func() error { return c.StartDomain(ctx, dom) },
		"DestroyDomain":  func() error { return c.DestroyDomain(ctx, dom) },
		"UndefineDomain": func() error { return c.UndefineDomain(ctx, dom) },
	} {
		if err := call(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if !c.Alive() {
		t.Error("answered calls killed the link")
	}
}

// A call libvirt never answers returns when its budget runs out, and kills its link: the
// next call fails at once instead of waiting out another budget.
func TestCallOverrunningItsBudgetKillsTheLink(t *testing.T) {
	c, _ := mockConn(t, false, 200*time.Millisecond)
	start := time.Now()
	_, err := c.Hostname(context.Background()) // the mock never answers this procedure
	if !errors.Is(err, errBudget) {
		t.Fatalf("Hostname = %v, want errBudget", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the call took %s with a budget of 200ms", d)
	}
	if c.Alive() {
		t.Error("the link survived a call that overran its budget")
	}
	start = time.Now()
	if _, err := c.LibVersion(context.Background()); !errors.Is(err, errLinkDead) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("next call = %v after %s, want errLinkDead at once", err, time.Since(start))
	}
}

// A cancelled caller leaves at once. On the pooled link, which others share, the call goes on
// under its budget rather than killing their link; on a dedicated link it is killed.
func TestCancelledCall(t *testing.T) {
	for _, dedicated := range []bool{false, true} {
		c, _ := mockConn(t, dedicated, 500*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		_, err := c.Hostname(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 300*time.Millisecond {
			t.Errorf("dedicated=%v: cancelled call = %v after %s", dedicated, err, time.Since(start))
		}
		if c.Alive() == dedicated {
			t.Errorf("dedicated=%v: link alive = %v right after the cancel", dedicated, c.Alive())
		}
		// The pooled link's abandoned call still overruns its budget: then the link goes.
		deadline := time.Now().Add(2 * time.Second)
		for c.Alive() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if c.Alive() {
			t.Errorf("dedicated=%v: a call left running past its budget did not kill the link", dedicated)
		}
	}
	c, _ := mockConn(t, false, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.LibVersion(ctx); !errors.Is(err, context.Canceled) || !c.Alive() {
		t.Errorf("a call with an ended ctx = %v, link alive %v; want ctx's error without touching the link", err, c.Alive())
	}
}

// H1: killing a link never waits for a writer stalled on it. Callers queued behind the stalled
// write (go-libvirt's socket mutex) are released as well.
func TestKillNeverWaitsForAStalledWriter(t *testing.T) {
	c, d := mockConn(t, false, time.Minute)
	d.conn.setStall()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.LibVersion(context.Background())
			errs <- err
		}()
	}
	select { // one call is in Write; the other is behind it, or comes after the kill
	case <-d.conn.stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("no call reached the stalled Write")
	}
	// A kill that waited for the stalled writer would wait for good: the write ends only when
	// the kill closes the connection.
	killed := make(chan struct{})
	go func() { c.l.kill("test"); close(killed) }()
	select {
	case <-killed:
	case <-time.After(30 * time.Second):
		t.Fatal("kill waited for the stalled writer")
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, errLinkDead) {
				t.Errorf("stalled call = %v, want errLinkDead", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a stalled call did not return after the kill")
		}
	}
	c.l.kill("again") // idempotent, and still immediate
}

// H2: go-libvirt never sees a failing reader; the failure comes back after the stream ends.
func TestEOFReader(t *testing.T) {
	broken := errors.New("disk read error")
	r := &eofReader{r: io.MultiReader(strings.NewReader("abc"), &failingReader{err: broken})}
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "abc" {
		t.Errorf("ReadAll = %q, %v; want the bytes before the failure and a clean end", b, err)
	}
	if !errors.Is(r.failure(), broken) {
		t.Errorf("failure() = %v", r.failure())
	}
	clean := &eofReader{r: strings.NewReader("x")}
	io.ReadAll(clean)
	if clean.failure() != nil {
		t.Errorf("a clean EOF recorded %v", clean.failure())
	}
}

type failingReader struct{ err error }

func (f *failingReader) Read([]byte) (int, error) { return 0, f.err }
