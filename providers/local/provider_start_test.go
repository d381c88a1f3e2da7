package local

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
)

func TestKilledProxyIsStoppedAndRestarts(t *testing.T) {
	p := newProvider(t, testConfig(t, 5))
	req := request("egress-kill", freePort(t))
	inst := mustCreate(t, p, req)
	first := mustGet(t, p, inst.ID)
	pids := proxies(p, req.Name)
	if len(pids) != 1 {
		t.Fatalf("proxies: %v", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Get to say Stopped", func() bool { return mustGet(t, p, inst.ID).State == providers.StateStopped })
	if got := mustGet(t, p, inst.ID); got.Address != "" {
		t.Errorf("Stopped instance has address %q", got.Address)
	}

	again, err := p.Create(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if again.State != providers.StateRunning || again.Address != inst.Address || again.Port != inst.Port ||
		!again.Marks.CreatedAt.Equal(first.Marks.CreatedAt) {
		t.Errorf("restarted = %+v, want Running like %+v", again, first)
	}
	if now := proxies(p, req.Name); len(now) != 1 || now[0] == pids[0] {
		t.Errorf("proxies after restart: %v (killed %d)", now, pids[0])
	}
	srv := upstream(t)
	if status, _ := through(t, again, url.UserPassword("x", "y"), srv.URL); status != 200 {
		t.Errorf("restarted proxy answers %d", status)
	}
}

// A provisioner killed while its Create is starting a proxy leaves the intermediate running
// with the lock: another Create waits for it and then finds the proxy it started, rather
// than starting a second one.
func TestProvisionerKilledMidCreate(t *testing.T) {
	cfg, stall := stalling(t, 5)
	p := newProvider(t, cfg)
	name, port := "egress-orphan", freePort(t)
	cfgJSON, _ := json.Marshal(cfg)

	prov := exec.Command(testBinary(t), "provision", string(cfgJSON), name, "uid-"+name, strconv.Itoa(port))
	var out strings.Builder
	prov.Stdout, prov.Stderr = &out, &out
	if err := prov.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stalled proxy", func() bool { return len(proxies(p, name)) == 1 })
	prov.Process.Kill()
	prov.Wait()

	if got := mustGet(t, p, idOf(name)); got.State != providers.StateProvisioning {
		t.Errorf("mid-start Get = %s, want Provisioning", got.State)
	}
	done := createAsync(t, p, request(name, port))
	select {
	case r := <-done:
		t.Fatalf("Create did not wait for the orphaned intermediate: %+v %v", r.inst, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	os.Remove(stall)
	r := <-done
	if r.err != nil {
		t.Fatalf("Create: %v (provisioner said %q)", r.err, out.String())
	}
	t.Cleanup(func() { p.Delete(context.Background(), r.inst.ID) })
	if r.inst.State != providers.StateRunning {
		t.Errorf("Create = %+v", r.inst)
	}
	if pids := proxies(p, name); len(pids) != 1 {
		t.Errorf("proxy processes: %v, want exactly one", pids)
	}
	if n := len(findProcesses(p.pidPath(name))); n != 1 {
		t.Errorf("%d processes carry the instance's mark, want 1 (the intermediate must be gone)", n)
	}
}

// A Create whose context ends while the proxy is starting leaves nothing behind.
func TestAbandonedStartLeavesNothing(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(p *Provider) context.Context
	}{
		{"caller's deadline", func(p *Provider) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}},
		{"intermediate's readiness timeout", func(p *Provider) context.Context {
			p.readyTimeout = 700 * time.Millisecond
			return ctxT(t)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, _ := stalling(t, 5)
			p := newProvider(t, cfg)
			name := "egress-abandoned"
			_, err := p.Create(c.setup(p), request(name, freePort(t)))
			if !errors.Is(err, providers.ErrTransient) {
				t.Fatalf("Create = %v, want ErrTransient", err)
			}
			if n := findProcesses(p.pidPath(name)); len(n) != 0 {
				t.Errorf("processes left: %v", n)
			}
			if _, err := p.Get(ctxT(t), idOf(name)); !errors.Is(err, providers.ErrNotFound) {
				t.Errorf("Get = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestMissingBinaryIsPermanent(t *testing.T) {
	cfg := testConfig(t, 5)
	cfg.Binary = filepath.Join(t.TempDir(), "no-such-egressd")
	p := newProvider(t, cfg)
	_, err := p.Create(ctxT(t), request("egress-nobin", freePort(t)))
	if !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("Create = %v, want ErrPermanent", err)
	}
}

func TestConcurrentProvidersShareAPool(t *testing.T) {
	// Two provider objects over one state dir stand for two provisioner processes.
	cfg := testConfig(t, 12)
	a, b := newProvider(t, cfg), newProvider(t, cfg)
	port := freePort(t)
	var wg sync.WaitGroup
	insts := make([]providers.Instance, 10)
	errs := make([]error, 10)
	for i := range insts {
		p := a
		if i%2 == 1 {
			p = b
		}
		wg.Go(func() { insts[i], errs[i] = p.Create(ctxT(t), request("egress-shared-"+strconv.Itoa(i), port)) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, inst := range insts {
		if errs[i] != nil {
			t.Errorf("Create %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() { a.Delete(context.Background(), inst.ID) })
		if seen[inst.Address] {
			t.Errorf("address %s given twice", inst.Address)
		}
		seen[inst.Address] = true
	}
}

func TestCancelledContext(t *testing.T) {
	p := newProvider(t, testConfig(t, 3))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Create(ctx, request("egress-cancel", freePort(t))); !errors.Is(err, providers.ErrTransient) {
		t.Errorf("Create = %v", err)
	}
	if err := p.Delete(ctx, "local/egress-cancel"); !errors.Is(err, providers.ErrTransient) {
		t.Errorf("Delete = %v", err)
	}
	if exists(p.dir("egress-cancel")) {
		t.Error("a cancelled Create left a directory")
	}
}

// checkDetached checks that the proxy leads a session of its own, was reparented away from
// this process, and holds no lock file.
func checkDetached(t *testing.T, pid int) {
	t.Helper()
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name: state ppid pgrp session ...
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	if ppid, _ := strconv.Atoi(fields[1]); ppid == os.Getpid() {
		t.Errorf("proxy %d is still this process's child", pid)
	}
	if sid, _ := strconv.Atoi(fields[3]); sid != pid {
		t.Errorf("proxy %d is in session %d, want its own", pid, sid)
	}
	fds, _ := os.ReadDir(filepath.Join(proc, "fd"))
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join(proc, "fd", fd.Name())); strings.HasSuffix(target, ".lock") {
			t.Errorf("proxy %d holds %s as fd %s", pid, target, fd.Name())
		}
	}
}

func TestAllocationSweepsLeftovers(t *testing.T) {
	p := newProvider(t, testConfig(t, 3))
	old := time.Now().Add(-2 * time.Minute)
	for _, n := range []string{tmpPrefix + "egress-x-1", trashPrefix + "egress-y-1", trashPrefix + "egress-z-1"} {
		if err := os.MkdirAll(filepath.Join(p.stateDir, n, "egress-q"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Chtimes(filepath.Join(p.stateDir, trashPrefix+"egress-y-1"), old, old)
	mustCreate(t, p, request("egress-sweep", freePort(t)))
	for n, want := range map[string]bool{
		tmpPrefix + "egress-x-1":   false, // a birth no one is at: allocation holds the lock
		trashPrefix + "egress-y-1": false, // an old removal
		trashPrefix + "egress-z-1": true,  // a removal that may be under way
	} {
		if got := exists(filepath.Join(p.stateDir, n)); got != want {
			t.Errorf("%s exists = %v, want %v", n, got, want)
		}
	}
}
