package local

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
)

// Many Creates at once, from goroutines of one provider and from a second provider over
// another state dir that was given the same addresses (another installation on the host, or
// a second test run): every one succeeds, on an address of its own, and listens there. The
// second state dir's allocations are invisible to the first, so the two pick the same
// addresses and race to bind them; the loser must move on, not fail.
func TestConcurrentCreatesGetDistinctListeningAddresses(t *testing.T) {
	const own, other = 12, 6
	cfg := testConfig(t, own+other+2)
	cfg2 := testConfig(t, 1)
	cfg2.Addresses = cfg.Addresses
	providersOf := []*Provider{newProvider(t, cfg), newProvider(t, cfg2)}
	port := freePort(t)
	insts := make([]providers.Instance, own+other)
	errs := make([]error, len(insts))
	var wg sync.WaitGroup
	for i := range insts {
		p := providersOf[0]
		if i >= own {
			p = providersOf[1]
		}
		wg.Go(func() { insts[i], errs[i] = p.Create(ctxT(t), request("egress-many-"+strconv.Itoa(i), port)) })
	}
	wg.Wait()
	seen := map[string]string{}
	for i, inst := range insts {
		if errs[i] != nil {
			t.Errorf("Create %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() {
			for _, p := range providersOf {
				p.Delete(context.Background(), inst.ID)
			}
		})
		if prev, ok := seen[inst.Address]; ok {
			t.Errorf("address %s given to %s and %s", inst.Address, prev, inst.ID)
		}
		seen[inst.Address] = inst.ID
	}
	srv := upstream(t)
	for i, inst := range insts {
		if errs[i] != nil {
			continue
		}
		// Each address answers as a proxy: the one this Create started, not another's.
		if status, _ := through(t, inst, nil, srv.URL); status != 200 {
			t.Errorf("%s on %s:%d answered %d", inst.ID, inst.Address, inst.Port, status)
		}
		p := providersOf[0]
		if i >= own {
			p = providersOf[1]
		}
		name, _ := parseID(inst.ID)
		if pids := proxies(p, name); len(pids) != 1 {
			t.Errorf("%s has proxy processes %v, want one", inst.ID, pids)
		}
	}
}

// An address that something outside the state dir starts listening on between the pick and
// the proxy's bind is left: the Create takes the next address rather than failing, and the
// state dir keeps no record of the one it lost.
func TestAddressTakenDuringStartIsLeft(t *testing.T) {
	cfg, stall := stalling(t, 3)
	p := newProvider(t, cfg)
	name, port := "egress-raced", freePort(t)
	done := createAsync(t, p, request(name, port))
	waitFor(t, "the stalled proxy", func() bool { return len(proxies(p, name)) == 1 })
	m, err := p.readMeta(name)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(m.Address, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Remove(stall)
	r := <-done
	if r.err != nil {
		t.Fatalf("Create with its address taken mid-start: %v", r.err)
	}
	t.Cleanup(func() { p.Delete(context.Background(), r.inst.ID) })
	if r.inst.Address == m.Address {
		t.Fatalf("Create returned the address it lost, %s", m.Address)
	}
	got, err := p.readMeta(name)
	if err != nil || got.Address != r.inst.Address {
		t.Fatalf("instance.json = %+v, %v; want address %s", got, err, r.inst.Address)
	}
	if status, _ := through(t, r.inst, nil, upstream(t).URL); status != 200 {
		t.Errorf("the instance on its new address answered %d", status)
	}
	// The address lost is free again in the state dir: once the listener is gone, the next
	// Create takes it.
	ln.Close()
	next := mustCreate(t, p, request("egress-next", port))
	if next.Address != m.Address {
		t.Errorf("next Create took %s, want the freed %s", next.Address, m.Address)
	}
}

// An address freed by Delete is taken again at once, although the old proxy's connections
// linger in TIME_WAIT on it: the proxy listens with SO_REUSEADDR (Go's default), so the
// kernel lets it bind, and Delete returns only once the old proxy has exited.
func TestFreedAddressWithTimeWaitIsReused(t *testing.T) {
	p := newProvider(t, testConfig(t, 1))
	port := freePort(t)
	a := mustCreate(t, p, request("egress-tw-a", port))
	srv := upstream(t)
	// The proxy answers a "Connection: close" request and closes first (the client reads to
	// its EOF before it closes), so its side of each connection waits in TIME_WAIT.
	for range 3 {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(a.Address, strconv.Itoa(a.Port)), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", srv.URL, srv.Listener.Addr())
		resp, err := io.ReadAll(c)
		c.Close()
		if err != nil || !strings.HasPrefix(string(resp), "HTTP/1.1 200") {
			t.Fatalf("through %s: %q, %v", a.Address, resp, err)
		}
	}
	if err := p.Delete(ctxT(t), a.ID); err != nil {
		t.Fatal(err)
	}
	if n := timeWaits(t, a.Address, a.Port); n == 0 {
		t.Fatalf("no connection of %s:%d in TIME_WAIT; the test shows nothing", a.Address, a.Port)
	}
	b := mustCreate(t, p, request("egress-tw-b", port))
	if b.Address != a.Address {
		t.Fatalf("took %s, want the freed %s (the pool has one address)", b.Address, a.Address)
	}
}

// timeWaits counts the TCP sockets in TIME_WAIT whose local end is addr:port (IPv4).
func timeWaits(t *testing.T, addr string, port int) int {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	ip := net.ParseIP(addr).To4()
	// /proc/net/tcp writes the address as the host-order uint32 in hex: on little-endian
	// machines, the bytes reversed.
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], port)
	n := 0
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == want && f[3] == "06" {
			n++
		}
	}
	return n
}
