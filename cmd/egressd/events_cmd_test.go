package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/nats-io/nats.go/jetstream"
)

func TestEventFiltersByStream(t *testing.T) {
	cases := []struct {
		kinds, proxy string
		want         map[string][]string
	}{
		{"phase", "", map[string][]string{events.StreamEvents: {"egress.events.phase.*"}}},
		{"lease", "px", map[string][]string{events.StreamLeaseEvents: {"egress.events.lease.px"}}},
		{"phase,report,op,phase", "", map[string][]string{events.StreamEvents: {"egress.events.phase.*", "egress.events.op.*"},
			events.StreamLeaseEvents: {"egress.events.report.*"}}},
	}
	for _, tc := range cases {
		got := eventFilters(tc.kinds, tc.proxy)
		if len(got) != len(tc.want) {
			t.Errorf("%q: %v, want %v", tc.kinds, got, tc.want)
		}
		for s, w := range tc.want {
			if !slices.Equal(got[s], w) {
				t.Errorf("%q on %s: %v, want %v", tc.kinds, s, got[s], w)
			}
		}
	}
	// No --kind: every kind, each on its own stream.
	all := eventFilters("", "")
	if n := len(all[events.StreamEvents]) + len(all[events.StreamLeaseEvents]); n != len(events.Kinds) {
		t.Errorf("no --kind: %v", all)
	}
}

// A --kind list spanning both streams prints one history in the order it was stored.
func TestEventsCmdMergesStreams(t *testing.T) {
	srv, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	if _, err := kvstore.Ensure(ctx, js, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 6 {
		k := []events.EventKind{events.KindPhase, events.KindLease, events.KindLease, events.KindOpResult, events.KindReport, events.KindPhase}[i]
		ev := events.Event{V: 1, ID: fmt.Sprint("ev-", i), Kind: k, Proxy: "px", At: time.Now().UTC()}
		b, _ := json.Marshal(ev)
		if _, err := js.Publish(ctx, events.EventSubject(k, "px"), b, jetstream.WithMsgID(ev.ID)); err != nil {
			t.Fatal(err)
		}
		if k != events.KindOpResult {
			want = append(want, ev.ID)
		}
	}
	var out, errb bytes.Buffer
	if code := eventsCmd(ctx, []string{"--nats-url", srv.ClientURL(), "--kind", "phase,lease,report", "-f=false", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev events.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got = append(got, ev.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("printed %v, want %v", got, want)
	}
}
