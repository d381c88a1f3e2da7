package prober

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// A proxy with auth.mode "lease" lets the probers through on tokens they sign themselves; a
// prober without the lease master (or with another) is refused with 407, so it never calls
// such a proxy healthy. Neither the master nor the proxy's key reaches a health record, an
// event or a log line.
func TestProbesSignTheirOwnLeaseTokens(t *testing.T) {
	master := leaseauth.NewMaster()
	e := newEnv(t)
	authFile := filepath.Join(t.TempDir(), "auth")
	if err := forwardproxy.WriteLeaseKeyFile(authFile, master.ProxyKey("leased").FileLine()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, func(ctx context.Context) error {
		return forwardproxy.Serve(ctx, ln, forwardproxy.Config{AuthFile: authFile})
	})
	addr := ln.Addr().String()

	for _, name := range []string{"leased", "other-name"} {
		doc, _ := json.Marshal(map[string]any{"provider": "local", "auth": map[string]string{"mode": "lease"},
			"healthCheck": map[string]any{"failureThreshold": 1}})
		if _, err := e.store.Proxies.Put(context.Background(), name, doc); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		proxy   string // the name the spec is under: its key derives from it
		master  leaseauth.Master
		healthy bool
	}{
		{"the master", "leased", master, true},
		{"no master", "leased", leaseauth.Master{}, false},
		{"another master", "leased", leaseauth.NewMaster(), false},
		{"another proxy's key", "other-name", master, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := e.probeNow(e.prober(nil, Config{LeaseMaster: c.master}), c.proxy, addr)
			if h.Healthy != c.healthy || (!c.healthy && !strings.Contains(h.LastError, "407")) {
				t.Fatalf("healthy %v (%s), want %v", h.Healthy, h.LastError, c.healthy)
			}
		})
	}

	key := strings.Split(strings.TrimSpace(master.ProxyKey("leased").FileLine()), ":")[2]
	for _, s := range []string{key, string(master.Encode())} {
		for _, ev := range e.eventsOn(events.EventsSubjects) {
			if b, _ := json.Marshal(ev); strings.Contains(string(b), s) {
				t.Errorf("an event holds a secret: %s", b)
			}
		}
		for _, p := range []string{"leased", "other-name"} {
			if h, _ := e.health(p); strings.Contains(func() string { b, _ := json.Marshal(h); return string(b) }(), s) {
				t.Errorf("a health record holds a secret")
			}
		}
		if strings.Contains(e.logs.String(), s) {
			t.Error("the logs hold a secret")
		}
	}
}
