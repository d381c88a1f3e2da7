package fleet

import (
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

// TestLeaseFloodKeepsLifecycle publishes lease traffic that fills the lease stream's cap, and
// so what the single stream of old held, several times over: the first phase change and op
// result of every proxy are still there, and the lease stream stayed within its cap.
func TestLeaseFloodKeepsLifecycle(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	const leaseCap = kvstore.MinEventsMaxBytes
	lim := kvstore.EventLimits{Lifecycle: kvstore.StreamLimits{MaxBytes: 4 * leaseCap}, Leases: kvstore.StreamLimits{MaxBytes: leaseCap}}
	if _, err := kvstore.Ensure(ctx, js, kvstore.Options{Events: lim}); err != nil {
		t.Fatal(err)
	}
	proxies := []string{"px-a", "px-b", "px-c"}
	for _, p := range proxies {
		publishEvent(t, js, events.Event{V: 1, Kind: events.KindPhase, Proxy: p, Phase: events.PhasePending, ID: "first-phase-" + p})
		publishEvent(t, js, events.Event{V: 1, Kind: events.KindOpResult, Proxy: p, ID: "first-op-" + p})
	}
	ls, err := js.Stream(ctx, events.StreamLeaseEvents)
	if err != nil {
		t.Fatal(err)
	}
	// Publish until the lease stream has dropped at least 4 caps' worth of events.
	var published int64
	for i := 0; published < 5*leaseCap; i++ {
		ev := events.Event{V: 1, Kind: events.KindLease, Proxy: proxies[i%len(proxies)], ID: fmt.Sprint("lease-", i),
			At: time.Now().UTC(), Reason: events.ReasonGranted, Lease: &events.LeaseEvent{ID: fmt.Sprint("l-", i), Holder: "crawler", Target: "example.com"}}
		b, _ := json.Marshal(ev)
		if _, err := js.Publish(ctx, events.EventSubject(ev.Kind, ev.Proxy), b, jetstream.WithMsgID(ev.ID)); err != nil {
			t.Fatal(err)
		}
		published += int64(len(b))
	}
	li, err := ls.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if li.State.Bytes > leaseCap || li.State.FirstSeq == 1 {
		t.Fatalf("lease stream: %d bytes from seq %d, want at most %d and its first events gone", li.State.Bytes, li.State.FirstSeq, leaseCap)
	}
	s, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		for _, k := range []events.EventKind{events.KindPhase, events.KindOpResult} {
			m, err := s.GetLastMsgForSubject(ctx, events.EventSubject(k, p))
			if err != nil {
				t.Fatalf("%s of %s gone after the lease flood: %v", k, p, err)
			}
			var ev events.Event
			if err := json.Unmarshal(m.Data, &ev); err != nil || !strings.HasPrefix(ev.ID, "first-") {
				t.Errorf("%s of %s: %+v %v", k, p, ev, err)
			}
		}
	}
}

func TestCountLeaseEvents(t *testing.T) {
	_, _, js := kvstoretest.Start(t)
	ctx := context.Background()
	if _, err := kvstore.Ensure(ctx, js, kvstore.Options{}); err != nil {
		t.Fatal(err)
	}
	lease := func(proxy, target string, r events.Reason) {
		publishEvent(t, js, events.Event{V: 1, Kind: events.KindLease, Proxy: proxy, Reason: r,
			Lease: &events.LeaseEvent{ID: "l", Target: target}})
	}
	report := func(proxy, target string, r events.ReportResult) {
		publishEvent(t, js, events.Event{V: 1, Kind: events.KindReport, Proxy: proxy, Reason: events.Reason(r),
			Lease: &events.LeaseEvent{ID: "l", Target: target, Result: r}})
	}
	lease("px-a", "old.example", events.ReasonGranted) // before the window
	from := time.Now()
	lease("px-a", "a.example", events.ReasonGranted)
	report("px-a", "a.example", events.ReportBlocked)
	lease("px-a", "a.example", events.ReasonReleased)
	lease("px-a", "b.example", events.ReasonGranted)
	lease("px-a", "b.example", events.ReasonExpired)
	lease("px-b", "a.example", events.ReasonGranted)
	lease("px-b", "a.example", events.ReasonRenewed)
	report("px-b", "a.example", events.ReportOK)
	report("px-b", "a.example", events.ReportFailed)
	lease("px-b", "a.example", events.ReasonProxyReplaced)
	lease("px-b", "", events.ReasonGranted)
	to := time.Now()
	lease("px-b", "a.example", events.ReasonGranted) // after it
	got, err := CountLeaseEvents(ctx, js, from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := []LeaseCount{
		{Proxy: "px-a", Target: "a.example", LeaseCounts: events.LeaseCounts{Granted: 1, Released: 1, Blocked: 1}},
		{Proxy: "px-a", Target: "b.example", LeaseCounts: events.LeaseCounts{Granted: 1, Expired: 1}},
		{Proxy: "px-b", Target: "", LeaseCounts: events.LeaseCounts{Granted: 1}},
		{Proxy: "px-b", Target: "a.example", LeaseCounts: events.LeaseCounts{Granted: 1, Renewed: 1, Ended: 1, OK: 1, Failed: 1}},
	}
	if !slices.Equal(got, want) {
		t.Errorf("counts\n got %+v\nwant %+v", got, want)
	}
	// A window with nothing in it, and one past the end of the stream.
	for _, w := range [][2]time.Time{{to.Add(-time.Hour), to.Add(-time.Hour)}, {time.Now().Add(time.Hour), time.Time{}}} {
		if got, err := CountLeaseEvents(ctx, js, w[0], w[1]); err != nil || len(got) != 0 {
			t.Errorf("empty window %v: %+v %v", w, got, err)
		}
	}
}

// publishEvent publishes ev on its subject as a leaser would, with an ID and a time.
func publishEvent(t *testing.T, js jetstream.JetStream, ev events.Event) {
	t.Helper()
	if ev.ID == "" {
		ev.ID = fmt.Sprintf("%s:%s:%d", ev.Kind, ev.Proxy, time.Now().UnixNano())
	}
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), events.EventSubject(ev.Kind, ev.Proxy), b, jetstream.WithMsgID(ev.ID)); err != nil {
		t.Fatalf("publish %s: %v", ev.ID, err)
	}
}
