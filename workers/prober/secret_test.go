package prober

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/egressd/egressd/events"
)

// The proxy password never reaches a health record, an event or a log line, whatever the
// probe meets: a wrong credential, a dead proxy, success, and a proxy that forwards the
// credential to the target.
func TestPasswordNeverLeaks(t *testing.T) {
	const user, sentinel = "crawler", "SENTINEL-pw-7f3a9c"
	e := newEnv(t)
	guarded, _ := startForwardProxy(t, "127.0.0.2:0", user, sentinel)
	other, _ := startForwardProxy(t, "127.0.0.3:0", user, "another")
	leaky := startLeakyProxy(t, nil, true)
	p := e.prober(nil, Config{})
	for _, tc := range []struct{ proxy, addr string }{
		{"right", guarded}, {"refused", other}, {"dead", closedAddr(t)}, {"leaky", leaky},
	} {
		e.putSpec(tc.proxy, spec{check: map[string]any{"failureThreshold": 1}, user: user, password: sentinel})
		e.probeNow(p, tc.proxy, tc.addr)
	}
	if h, _ := e.health("leaky"); !h.Healthy || !strings.Contains(strings.Join(h.LeakedHeaders, ","), "Proxy-Authorization") {
		t.Errorf("forwarded credential not detected: %+v", h)
	}
	if h, _ := e.health("refused"); !strings.Contains(h.LastError, "407") {
		t.Errorf("refused: %+v", h)
	}

	forms := []string{sentinel, base64.StdEncoding.EncodeToString([]byte(user + ":" + sentinel))}
	check := func(where, text string) {
		for _, f := range forms {
			if strings.Contains(text, f) {
				t.Errorf("the password is in %s: %s", where, text)
			}
		}
	}
	ctx := context.Background()
	keys, err := e.store.Health.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range keys.Keys() {
		entry, err := e.store.Health.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		check("health record "+k, string(entry.Value()))
		n++
	}
	if n != 4 {
		t.Errorf("%d health records, want 4", n)
	}
	stream, err := e.store.JS.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 4 {
		t.Errorf("%d events, want 4", info.State.Msgs)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		check("event "+m.Subject, string(m.Data))
	}
	check("the logs", e.logs.String())
}
