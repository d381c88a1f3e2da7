package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/nats-io/nats.go"
)

// rotationCrawler leases a proxy, sends requests through it for a while, releases it, and
// again, until stopped; every refusal of a request whose lease it still holds is a failure.
type rotationCrawler struct {
	nc      *nats.Conn
	web     string
	byKey   sync.Map // master ID → *atomic.Int64 requests that passed
	refused atomic.Int64
	mu      sync.Mutex
	why     []string
}

func (c *rotationCrawler) run(ctx context.Context) {
	client := func(u *url.URL) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}}
	}
	for ctx.Err() == nil {
		msg, err := c.nc.Request(events.LeaseAcquireSubject, []byte(`{"selector":{"kind":"rot"},"ttlSeconds":15}`), 5*time.Second)
		var r events.LeaseReply
		if err != nil || json.Unmarshal(msg.Data, &r) != nil || r.Lease.URL == "" {
			time.Sleep(200 * time.Millisecond) // pacing: egressd restarts in the middle
			continue
		}
		u, _ := url.Parse(r.Lease.URL)
		pass, _ := u.User.Password()
		tok, _ := leaseauth.ParseToken(pass)
		hc := client(u)
		// Use it for 10 s, inside its 15 s: a lease taken before the switch is still used
		// well after it, with the old master's token.
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && ctx.Err() == nil; {
			resp, err := hc.Get(c.web)
			if err != nil {
				continue // a connection error is no refusal
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				c.refused.Add(1)
				c.mu.Lock()
				if len(c.why) < 10 {
					c.why = append(c.why, fmt.Sprintf("%s lease %s (master %s): HTTP %d", time.Now().Format(time.RFC3339Nano), r.Lease.ID, tok.KeyID, resp.StatusCode))
				}
				c.mu.Unlock()
				continue
			}
			n, _ := c.byKey.LoadOrStore(tok.KeyID, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			time.Sleep(20 * time.Millisecond) // pacing: load, not a flood on a shared machine
		}
		_, _ = c.nc.Request(events.LeaseReleaseSubject, []byte(fmt.Sprintf(`{"id":%q}`, r.Lease.ID)), 5*time.Second)
	}
}

func (c *rotationCrawler) passed(kid string) int64 {
	if n, ok := c.byKey.Load(kid); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// leaseMasterState is `egressd lease-master status --json`.
func leaseMasterState(t *testing.T, n *node) (st struct {
	Phase, Current, Next, Previous string
	Waiting                        []string
	Proxies                        []struct {
		Name, Generation string
		KeyIDs           []string
	}
}) {
	t.Helper()
	if err := json.Unmarshal([]byte(n.egressd("lease-master", "status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// readRing is the ring as stored: the test plays the attacker who kept a copy of the old master.
func readRing(t *testing.T, n *node) leaseauth.Ring {
	t.Helper()
	out := n.nats("kv", "get", events.BucketLocks, events.KeyLeaseMaster, "--raw")
	r, err := leaseauth.ParseRing([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Master rotation under lease load, with real processes: three lease-mode proxies on the
// local provider, crawlers leasing them and sending requests through them without pause;
// `egressd lease-master rotate` begins, egressd is killed -9 while the next master spreads
// and started again, the rotate command is killed -9 after the switch and run again to the
// end. Not one request with a valid lease is refused at any point; requests pass with tokens
// of both masters; while the rotation spreads, proxies accept tokens of both masters; after
// the retirement, a token signed with the old master (as one who kept it would forge) is
// refused as of an unknown master; status and events say each phase; no master is ever in
// egressd's output.
func TestLeaseMasterRotationUnderLoad(t *testing.T) {
	needNats(t)
	dir := t.TempDir()
	defer killProcs(t, dir)
	n := startNode(t, dir, "--config", writeConfig(t, dir, 55))
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer web.Close()
	names := []string{"rot-1", "rot-2", "rot-3"}
	for _, name := range names {
		n.nats("kv", "put", "proxies", name, `{"provider":"local","maxLeases":10,"attributes":{"kind":"rot"},"auth":{"mode":"lease"},`+poolHealth+`}`)
	}
	rows := n.waitRows("the proxies Ready", 90*time.Second, allPhase(names, events.PhaseReady))
	old := readRing(t, n)
	if old.Phase() != leaseauth.PhaseSteady {
		t.Fatalf("before the rotation: %s", old)
	}

	nc, _ := n.client()
	c := &rotationCrawler{nc: nc, web: web.URL}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(ctx) }()
	}
	defer func() { stop(); wg.Wait() }()
	waitUntil(t, "the crawlers to get through", 30*time.Second, func() (bool, string) { return c.passed(old.Current.ID()) > 20, "" })

	// Begin: the next master spreads; nothing signs with it yet.
	out := n.egressd("lease-master", "rotate", "--wait=false")
	ring := readRing(t, n)
	if ring.Phase() != leaseauth.PhaseSpreading || ring.Current.ID() != old.Current.ID() {
		t.Fatalf("after rotate --wait=false: %s (%s)", ring, out)
	}
	next := ring.Next

	// egressd dies while the keys spread, and starts again: the ring in NATS says where it was.
	n.kill9()
	n.start()
	waitUntil(t, "every proxy to hold the next master", 60*time.Second, func() (bool, string) {
		st := leaseMasterState(t, n)
		return st.Phase == leaseauth.PhaseSpreading && len(st.Waiting) == 0 && len(st.Proxies) == len(names), fmt.Sprint(st)
	})
	// A viewer's status says the phase and what each proxy holds.
	waitUntil(t, "status leasekeys to show the spread", 30*time.Second, func() (bool, string) {
		s := n.egressd("status", "leasekeys")
		return strings.Contains(s, "spreading") && strings.Count(s, old.Current.ID()+","+next.ID()) >= 2*len(names), s
	})
	// While it spreads, a proxy takes tokens of either master.
	gen := rows["rot-1"].Status.Generation
	addr := "http://" + rows["rot-1"].Address
	for _, m := range []leaseauth.Master{old.Current, next} {
		u := withCreds(t, addr, url.UserPassword(m.InstanceKey("rot-1", gen).Sign("spread-check", time.Now().Add(time.Minute))))
		if code := curlVia(t, u, web.URL); code != "200" {
			t.Errorf("while spreading, a token of master %s: HTTP %s", m.ID(), code)
		}
	}

	// Switch, then the rotate command dies while the previous master retires.
	cmd, lines := startRotate(t, n, "--max-ttl", "20s", "--poll", "500ms")
	waitLine(t, lines, "new lease tokens are signed with master "+next.ID())
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if r := readRing(t, n); r.Phase() != leaseauth.PhaseRetiring || r.Current.ID() != next.ID() {
		t.Fatalf("after the switch: %s", r)
	}
	// Retiring by hand before the old master's tokens have expired is refused.
	early := exec.Command(egressdBin, "lease-master", "retire", "--nats-url", n.url)
	early.Env = n.environ()
	if out, err := early.CombinedOutput(); err == nil || !strings.Contains(string(out), "not yet") {
		t.Errorf("lease-master retire right after the switch: %v\n%s", err, out)
	}
	// Run again at once: it continues, and retires the old master once its tokens have all
	// expired, not while the leases taken before the switch are still in use.
	cmd, lines = startRotate(t, n, "--max-ttl", "20s", "--poll", "500ms")
	final := waitLine(t, lines, "rotation done")
	if !strings.Contains(final, "retired") {
		t.Errorf("the rotation's output does not say the old master retired:\n%s", final)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rotate: %v", err)
	}
	if r := readRing(t, n); r.Phase() != leaseauth.PhaseSteady || r.Current.ID() != next.ID() {
		t.Fatalf("after the rotation: %s", r)
	}
	waitUntil(t, "the proxies to hold the new master only", 30*time.Second, func() (bool, string) {
		st := leaseMasterState(t, n)
		for _, p := range st.Proxies {
			if strings.Join(p.KeyIDs, ",") != next.ID() {
				return false, fmt.Sprint(st)
			}
		}
		return len(st.Proxies) == len(names), fmt.Sprint(st)
	})
	waitUntil(t, "the crawlers to get through with the new master", 30*time.Second, func() (bool, string) { return c.passed(next.ID()) > 20, "" })
	if s := n.egressd("status", "leasekeys"); !strings.Contains(s, "steady") || strings.Contains(s, old.Current.ID()) {
		t.Errorf("status leasekeys after the rotation:\n%s", s)
	}
	time.Sleep(3 * time.Second) // load after the retirement, too
	stop()
	wg.Wait()

	c.mu.Lock()
	if c.refused.Load() > 0 {
		t.Errorf("%d requests with a valid lease refused:\n%s", c.refused.Load(), strings.Join(c.why, "\n"))
	}
	c.mu.Unlock()

	// The old master, kept by whoever leaked it, signs nothing any proxy takes now.
	forged := withCreds(t, addr, url.UserPassword(old.Current.InstanceKey("rot-1", gen).Sign("forged", time.Now().Add(time.Minute))))
	if code := curlVia(t, forged, web.URL); code != "407" {
		t.Errorf("a token of the retired master: HTTP %s, want 407", code)
	}
	counts := filepath.Join(dir, "data", "local", "local", rows["rot-1"].Status.InstanceName, "refusals.json")
	waitUntil(t, "the refusal to be counted as of an unknown master", 30*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(counts)
		return strings.Contains(string(b), `"key":`), string(b)
	})

	evs := n.egressd("events", "-f=false", "--kind", "leasemaster")
	for _, want := range []events.Reason{events.ReasonRotationBegun, events.ReasonKeySwitched, events.ReasonKeyRetired} {
		// Exactly one each: the rotate killed after the switch announced it again on its
		// next run (in case the kill came before the event), under the same event ID.
		if strings.Count(evs, string(want)) != 1 {
			t.Errorf("%d %s events, want 1:\n%s", strings.Count(evs, string(want)), want, evs)
		}
	}
	seen := n.logs() + out + final + evs + n.egressd("lease-master", "status") + statusDump(n)
	for _, m := range []leaseauth.Master{old.Current, next} {
		if strings.Contains(seen, string(m.Encode())) {
			t.Errorf("master %s appears in egressd's output", m.ID())
		}
	}
}

// startRotate runs `egressd lease-master rotate` in the background; its output lines arrive on
// the channel.
func startRotate(t *testing.T, n *node, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(egressdBin, append([]string{"lease-master", "rotate", "--nats-url", n.url}, args...)...)
	cmd.Env = n.environ()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

// waitLine reads lines until one says want, and returns those read.
func waitLine(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	deadline := time.After(90 * time.Second)
	var seen []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the command ended without saying %q:\n%s", want, strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.Contains(l, want) {
				return strings.Join(seen, "\n")
			}
		case <-deadline:
			t.Fatalf("no %q within 90 s:\n%s", want, strings.Join(seen, "\n"))
		}
	}
}
