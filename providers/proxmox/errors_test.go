package proxmox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/providers"
)

// fixture is one captured PVE error answer: status, reason phrase, body. Files are named after
// the fact they pin (F2-…, F22-…, docs/providers/proxmox.md); ref-… for the shapes of users'
// reports and the API viewer, which were not captured on a PVE of ours.
type fixture struct {
	Status int    `json:"status"`
	Reason string `json:"reason"`
	Body   string `json:"body"`
}

func loadFixture(t *testing.T, name string) fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

// serveRaw answers every request on a loopback socket with f, written by hand: net/http's
// server cannot send a reason phrase of its own, and PVE puts its error text there (F1).
func serveRaw(t *testing.T, f fixture) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
					return
				}
				fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Length: %d\r\n", f.Status, f.Reason, len(f.Body))
				if f.Body != "" {
					fmt.Fprint(conn, "Content-Type: application/json;charset=UTF-8\r\n")
				}
				fmt.Fprint(conn, "\r\n"+f.Body)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func testClient(t *testing.T, url string) *client {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("egressd@pve!prov=00000000-0000-0000-0000-000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := validConfig()
	cfg.URL, cfg.TokenFile = url, tok
	c, err := newClient(cfg.settings(), discardLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// Every fixture goes through the real client and classify, per op. The predicates are the
// only places a PVE message is matched; each matched string is pinned here.
func TestClassifyFixtures(t *testing.T) {
	type want struct {
		get, create, delete error
		missing, taken      bool
		lock, agentDown     bool
	}
	var (
		nf, tr, pe = providers.ErrNotFound, providers.ErrTransient, providers.ErrPermanent
	)
	cases := map[string]want{
		"F2-missing-vm":           {get: nf, create: tr, delete: tr, missing: true},
		"F4-vmid-taken":           {get: tr, create: tr, delete: tr, taken: true},
		"F5-agent-not-running":    {get: tr, create: tr, delete: tr, agentDown: true},
		"F5-agent-not-configured": {get: tr, create: tr, delete: tr},
		"F5-vm-not-running":       {get: tr, create: tr, delete: tr},
		"F7-vm-locked":            {get: tr, create: tr, delete: tr, lock: true},
		"F9-tag-invalid":          {get: pe, create: pe, delete: pe},
		"F22-auth-failed":         {get: pe, create: pe, delete: pe},
		"F22-no-ticket":           {get: pe, create: pe, delete: pe},
		"ref-lock-timeout":        {get: tr, create: tr, delete: tr, lock: true},
		"ref-596-node-timeout":    {get: tr, create: tr, delete: tr},
		"ref-595-no-route":        {get: tr, create: tr, delete: tr},
	}
	files, _ := filepath.Glob("testdata/*.json")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if _, ok := cases[name]; !ok {
			t.Errorf("fixture %s is not in the table", name)
		}
		if b, _ := os.ReadFile(f); strings.Contains(string(b), "PVEAPIToken") {
			t.Errorf("fixture %s holds a token header", name)
		}
	}
	p := &Provider{name: "pve"}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			fx := loadFixture(t, name)
			c := testClient(t, serveRaw(t, fx))
			err := c.do(context.Background(), call{method: http.MethodGet, path: "/version"}, nil)
			ae, ok := apiErr(err)
			if !ok || ae.Status != fx.Status {
				t.Fatalf("do = %v, want an apiError with status %d", err, fx.Status)
			}
			// The text comes from the body's message when there is one, else the status line.
			if !strings.Contains(err.Error(), fx.Reason) {
				t.Errorf("error %q lacks the reason %q", err, fx.Reason)
			}
			for op, class := range map[string]error{opGet: w.get, opCreate: w.create, opDelete: w.delete} {
				if got := providers.ClassOf(p.classify(op, "vms/100000/egress-x", err)); got != class {
					t.Errorf("%s: class %v, want %v", op, got, class)
				}
			}
			if isGone(err) != w.missing || isTaken(err) != w.taken || isLockContention(err) != w.lock || isAgentNotRunning(err) != w.agentDown {
				t.Errorf("predicates gone=%v taken=%v lock=%v agentDown=%v, want %+v",
					isGone(err), isTaken(err), isLockContention(err), isAgentNotRunning(err), w)
			}
		})
	}
	// Each matched string occurs in a fixture.
	var all strings.Builder
	for _, f := range files {
		b, _ := os.ReadFile(f)
		all.Write(b)
	}
	for _, m := range []string{msgNoConfig, msgDoesNotExist, msgAlreadyExists, msgAgentNotUp, msgLocked, msgCantLock, msgLockGotTimeout} {
		if !strings.Contains(all.String(), m) {
			t.Errorf("the matched string %q is pinned by no fixture", m)
		}
	}
}

// A lock timeout may end a task rather than the request (parallel clones); it is retried too.
// Causes of our own map to their classes.
func TestClassifyCauses(t *testing.T) {
	lockTask := &taskError{upid: "UPID:pv1-1:0:0:0:qmclone:9001:egressd@pve!prov:", exit: loadFixture(t, "ref-lock-timeout").Reason}
	if !isLockContention(lockTask) || !errors.Is(lockTask, errTaskFailed) {
		t.Errorf("a clone task ending in a lock timeout is not lock contention")
	}
	if isLockContention(&taskError{exit: "shrinking disks is not supported"}) {
		t.Errorf("a failed resize counts as lock contention")
	}
	if !isGoneTask(&taskError{exit: loadFixture(t, "F2-missing-vm").Reason}) || isGoneTask(&taskError{exit: "storage 'x' does not exist"}) {
		t.Errorf("isGoneTask matches more or less than F2")
	}
	cases := []struct {
		op    string
		err   error
		class error
	}{
		{opGet, errGone, providers.ErrNotFound},
		{opCreate, errGone, providers.ErrTransient},
		{opDelete, errGone, providers.ErrTransient},
		{opGet, errBadID, providers.ErrPermanent},
		{opCreate, errBadRequest, providers.ErrPermanent},
		{opCreate, errForeign, providers.ErrPermanent},
		{opCreate, errNotOurs, providers.ErrPermanent},
		{opCreate, errTwins, providers.ErrPermanent},
		{opCreate, errNoTemplate, providers.ErrPermanent},
		{opCreate, errNoBootDisk, providers.ErrPermanent},
		{opCreate, errTokenMalformed, providers.ErrPermanent},
		{opCreate, errTokenUnreadable, providers.ErrTransient},
		{opCreate, errLocked, providers.ErrTransient},
		{opCreate, lockTask, providers.ErrTransient},
		{opCreate, errVMIDsExhausted, providers.ErrTransient},
		{opCreate, errNotStarted, providers.ErrTransient},
		{opCreate, errBusy, providers.ErrTransient},
		{opCreate, errBadAnswer, providers.ErrTransient},
		{opGet, context.DeadlineExceeded, providers.ErrTransient},
		{opGet, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, providers.ErrTransient},
		{opGet, &apiError{Status: 404, Message: "Not Found"}, providers.ErrPermanent},
		{opGet, &apiError{Status: 403, Message: "Permission check failed"}, providers.ErrPermanent},
		{opGet, &apiError{Status: 502, Message: "Bad Gateway"}, providers.ErrTransient},
		{opGet, &apiError{Status: 500, Message: "storage 'x' does not exist"}, providers.ErrTransient},
	}
	p := &Provider{name: "pve"}
	for _, c := range cases {
		err := p.classify(c.op, "id", fmt.Errorf("wrapped: %w", c.err))
		if got := providers.ClassOf(err); got != c.class {
			t.Errorf("%s %v: class %v, want %v", c.op, c.err, got, c.class)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%s %v: the cause is lost", c.op, c.err)
		}
	}
}

// An error body is read up to 64 KiB, never more: a proxy's page cannot flood an error.
func TestErrorBodyCapped(t *testing.T) {
	big := `{"data":null,"message":"` + strings.Repeat("x", 200<<10) + `"}`
	c := testClient(t, serveRaw(t, fixture{Status: 500, Reason: "Internal Server Error", Body: big}))
	err := c.do(context.Background(), call{method: http.MethodGet, path: "/version"}, nil)
	ae, ok := apiErr(err)
	if !ok || ae.Status != 500 {
		t.Fatalf("do = %v", err)
	}
	// The body was cut, so it did not parse: the reason phrase stands.
	if len(err.Error()) > maxErrorBody || ae.Message != "Internal Server Error" {
		t.Errorf("error of %d bytes, message %.40q", len(err.Error()), ae.Message)
	}
	if !slices.Contains([]int{500}, ae.Status) {
		t.Error("status lost")
	}
}
