package gcptest

import (
	"strings"
	"testing"
)

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		field string
	}{
		{name: "no project", opts: Options{Zones: []string{zoneA}, ProxyPort: 1, Serve: serveForwardProxy}, field: "Project"},
		{name: "no zones", opts: Options{Project: project, ProxyPort: 1, Serve: serveForwardProxy}, field: "Zones"},
		{name: "no port", opts: Options{Project: project, Zones: []string{zoneA}, Serve: serveForwardProxy}, field: "ProxyPort"},
		{name: "port too big", opts: Options{Project: project, Zones: []string{zoneA}, ProxyPort: 70000, Serve: serveForwardProxy}, field: "ProxyPort"},
		{name: "no proxy", opts: Options{Project: project, Zones: []string{zoneA}, ProxyPort: 1}, field: "Serve"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.opts)
			if err == nil {
				s.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %q does not name %s", err, tt.field)
			}
		})
	}
}

// An insert still in flight when the simulator closes leaves nothing running (goleak in
// TestMain checks the goroutines, this the proxy).
func TestCloseMidInsert(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := e.ic.Insert(e.ctx, instanceReq(zoneA, "unfinished", nil)); err != nil {
		t.Fatal(err)
	}
	e.sim.Close()
	e.sim.Close() // twice is harmless: Cleanup closes it again
	if !refused(proxyAddr(pool(1)[0].String())) {
		t.Error("a proxy listens after Close")
	}
}
