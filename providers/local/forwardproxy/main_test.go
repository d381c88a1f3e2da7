package forwardproxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMainForeground(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	dir := t.TempDir()
	addr := closedPort(t)
	pidFile := filepath.Join(dir, "pid")
	logFile := filepath.Join(dir, "proxy.log")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--listen", addr, "--pid-file", pidFile, "--log-file", logFile, "--instance", "egress-test"}, io.Discard)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(pidFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no pid file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if data, _ := os.ReadFile(pidFile); strings.TrimSpace(string(data)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("pid file says %q", data)
	}
	resp, err := proxyClient(addr, nil).Get(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("exit code %d", code)
	}
	if log, _ := os.ReadFile(logFile); !strings.Contains(string(log), "instance=egress-test") {
		t.Errorf("log file: %s", log)
	}
}

func TestMainUsageAndListenErrors(t *testing.T) {
	ctx := context.Background()
	if code := Main(ctx, []string{}, io.Discard); code != ExitUsage {
		t.Errorf("no --listen: %d", code)
	}
	if code := Main(ctx, []string{"--listen", "x:1", "--source", "nope"}, io.Discard); code != ExitUsage {
		t.Errorf("bad --source: %d", code)
	}
	if code := Main(ctx, []string{"--listen", "127.0.0.1:1", "extra"}, io.Discard); code != ExitUsage {
		t.Errorf("extra argument: %d", code)
	}
	busy := startProxy(t, Config{})
	if code := Main(ctx, []string{"--listen", busy}, io.Discard); code != ExitAddrInUse {
		t.Errorf("address in use: %d, want %d", code, ExitAddrInUse)
	}
	if code := Main(ctx, []string{"--listen", "192.0.2.1:3128"}, io.Discard); code != ExitAddrNotAvail {
		t.Errorf("foreign address: %d, want %d", code, ExitAddrNotAvail)
	}
}

func TestArgsPrefix(t *testing.T) {
	p, ok := argsPrefix([]string{"-v", "forward-proxy", "--listen", "a"}, []string{"--listen", "a"})
	if !ok || strings.Join(p, " ") != "-v forward-proxy" {
		t.Errorf("got %q %v", p, ok)
	}
	if _, ok := argsPrefix([]string{"x"}, []string{"y"}); ok {
		t.Error("mismatch accepted")
	}
}
