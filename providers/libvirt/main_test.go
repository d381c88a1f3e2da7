package libvirt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
)

const testInstallation = "inst-test"

// testImage is a qcow2 file as far as anyone here looks: the magic, no backing file, and a
// virtual size.
func testImage(virtual uint64, size int) []byte {
	b := make([]byte, size)
	copy(b, qcow2Magic)
	binary.BigEndian.PutUint32(b[4:8], 3)
	binary.BigEndian.PutUint64(b[24:32], virtual)
	for i := 32; i < size; i++ {
		b[i] = byte(i * 7)
	}
	return b
}

// imageServer serves one image and counts the GETs; delay slows every response.
type imageServer struct {
	*httptest.Server
	data  []byte
	gets  atomic.Int64
	delay time.Duration
	mu    sync.Mutex
	fail  int // status to answer with, 0 for the image
}

func newImageServer(t *testing.T, data []byte) *imageServer {
	s := &imageServer{data: data}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.gets.Add(1)
		s.mu.Lock()
		fail, delay := s.fail, s.delay
		s.mu.Unlock()
		time.Sleep(delay)
		if fail != 0 {
			http.Error(w, "no", fail)
			return
		}
		http.ServeContent(w, r, "image.qcow2", time.Time{}, bytes.NewReader(s.data))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *imageServer) sha() string {
	sum := sha256.Sum256(s.data)
	return hex.EncodeToString(sum[:])
}

func (s *imageServer) setFail(status int) {
	s.mu.Lock()
	s.fail = status
	s.mu.Unlock()
}

func (s *imageServer) setDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// testConfig is a valid config for hosts on a network "default", with the image at url.
func testConfig(url, sha string, hosts ...string) Config {
	if len(hosts) == 0 {
		hosts = []string{"h1"}
	}
	cfg := Config{
		SSHKeyFile:            "/nonexistent/id_ed25519",
		InsecureIgnoreHostKey: true,
		Images:                map[string]ImageConfig{"tiny": {URL: url, SHA256: sha, Format: "qcow2", Firmware: "bios"}},
		MachineTypes:          map[string]MachineType{"small": {VCPUs: 1, MemoryMiB: 256}},
		DomainType:            "qemu",
		Budgets:               Budgets{Running: Duration(3 * time.Second)},
	}
	for _, h := range hosts {
		cfg.Hosts = append(cfg.Hosts, HostConfig{Name: h, Address: h + ".example:22", User: "egressd", Network: "default"})
	}
	return cfg
}

// newFakeProvider builds a provider over the fake cloud as process proc.
func newFakeProvider(t *testing.T, proc *fakeProc, cfg Config, log *slog.Logger, hooks Hooks) *Provider {
	t.Helper()
	p, err := build("lv", cfg, log, hooks)
	if err != nil {
		t.Fatal(err)
	}
	p.setDial(proc.dial)
	t.Cleanup(func() { p.Close() })
	return p
}

func testRequest(name, uid string) providers.CreateRequest {
	return providers.CreateRequest{Name: name, UID: uid, Installation: testInstallation, Proxy: "p-" + uid,
		Host: "h1", Port: 3128, UserData: providers.UserData("#!/bin/sh\necho hello\n")}
}

func mustCreate(t *testing.T, p *Provider, req providers.CreateRequest) providers.Instance {
	t.Helper()
	inst, err := p.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create(%s): %v", req.Name, err)
	}
	return inst
}

func wantClass(t *testing.T, what string, err, class error) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Errorf("%s = %v, want class %q", what, err, class)
	}
}
