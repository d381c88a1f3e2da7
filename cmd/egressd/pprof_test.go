package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCheckPprofAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:6060", true},
		{"127.0.0.1:0", true},
		{"[::1]:6060", true},
		{"localhost:6060", true},
		{"127.9.9.9:6060", true},
		{"0.0.0.0:6060", false},
		{":6060", false},
		{"[::]:6060", false},
		{"10.0.0.1:6060", false},
		{"example.com:6060", false},
		{"6060", false},
	} {
		err := checkPprofAddr(tc.addr)
		if (err == nil) != tc.ok {
			t.Errorf("checkPprofAddr(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--pprof-listen") {
			t.Errorf("checkPprofAddr(%q) = %v: does not name the flag", tc.addr, err)
		}
	}
}

// egressd run refuses a non-loopback --pprof-listen before it starts anything.
func TestRunRefusesPprofBeyondLoopback(t *testing.T) {
	var stderr bytes.Buffer
	code := runCmd(t.Context(), []string{"--data-dir", t.TempDir(), "--pprof-listen", "0.0.0.0:6060"}, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--pprof-listen") || !strings.Contains(stderr.String(), "loopback") {
		t.Fatalf("exit %d, stderr %q: want 2 and a loopback error naming --pprof-listen", code, stderr.String())
	}
}
