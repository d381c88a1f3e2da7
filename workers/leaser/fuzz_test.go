package leaser

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
)

// FuzzLeaseRequestDecoders feeds arbitrary bytes to every request decoder: each either accepts a
// request that survives a round trip, or answers a 400 naming a field. None panics.
func FuzzLeaseRequestDecoders(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"selector":{"geo":"de"},"target":"example.com","ttlSeconds":300,"holder":"c7","sticky":"s42"}`,
		`{"id":"crawl-1.0.0123456789abcdef","ttlSeconds":60}`, `{"id":"crawl-1.0.0123456789abcdef"}`,
		`{"id":"crawl-1.0.0123456789abcdef","result":"blocked","target":"a","cooldownSeconds":60,"release":true}`,
		`{"id":"crawl-1.0.0123456789abcdef","result":"failed"}`, `{"ttl":1}`, `{"ttlSeconds":-1}`, `[`, `null`,
		`{"selector":null}`, `{"id":"a.01.x"}`,
		`{"sticky":"s42","sessionSeconds":600,"stickyMode":"strict","strategy":"round-robin","holder":"c7"}`,
		`{"strategy":"random"}`, `{"strategy":"lowest-latency","sticky":"s","stickyMode":"soft"}`, `{"sessionSeconds":5}`, `{"result":"meh"}`, `{"a":1,"a":2}`, `{"ttlSeconds":1e3}`,
		`{"requestId":"5f0c2a9e8b7d4c31a6e2f90b1d3c7a48"}`, `{"requestId":""}`, `{"requestId":"a b"}`, `{"requestId":"\u00e9"}`,
		`{"requestId":null}`, `{"requestId":7}`,
		`{"waitSeconds":30}`, `{"waitSeconds":61}`, `{"waitSeconds":-1}`, `{"waitSeconds":9223372036854775807}`,
		`{"strategy":"best-for-target","target":"a"}`, `{"target":"a","tiers":[{"pool":"dc"},{"pool":"resi"}]}`,
		`{"target":"a","selector":{"pool":"x"},"tiers":[{"pool":"dc"}]}`, `{"tiers":[{}]}`, `{"target":"a","tiers":[]}`,
		`{"target":"a","tiers":[null]}`, `{"target":"a","tiers":[{"":"x"}]}`, `{"target":"a","tiers":[{"pool":"dc"}],"waitSeconds":1}`,
	} {
		f.Add([]byte(s))
	}
	// New does no I/O, but it wants every handle there: a real server's.
	_, nc, js := kvstoretest.Start(f)
	store, err := kvstore.Ensure(context.Background(), js, kvstore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	l, err := New(Config{Buckets: BucketsOf(store), NC: nc})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(what string, err error) bool {
			if err == nil {
				return true
			}
			var ae *apiError
			if !errors.As(err, &ae) || ae.code != events.CodeBadRequest || ae.field == "" || ae.msg == "" {
				t.Fatalf("%s: %T %v is not a 400 naming a field", what, err, err)
			}
			return false
		}
		if r, ttl, err := l.decodeAcquire(data); check("acquire", err) {
			if ttl < l.cfg.MinTTL || ttl > l.cfg.MaxTTL {
				t.Fatalf("accepted TTL %v", ttl)
			}
			if (r.SessionSeconds != 0 && r.Sticky == "") || (r.StickyMode == events.StickyStrict && r.SessionSeconds == 0) ||
				r.SessionSeconds < 0 || r.SessionSeconds > MaxSessionSeconds {
				t.Fatalf("accepted session %+v", r)
			}
			if r.WaitSeconds < 0 || time.Duration(r.WaitSeconds)*time.Second > l.cfg.MaxWait {
				t.Fatalf("accepted waitSeconds %d over the maximum %v", r.WaitSeconds, l.cfg.MaxWait)
			}
			if len(r.RequestID) > events.MaxRequestIDLen || strings.ContainsFunc(r.RequestID, func(c rune) bool { return c <= ' ' || c > '~' }) {
				t.Fatalf("accepted requestId %q", r.RequestID)
			}
			if r.Tiers != nil && (len(r.Tiers) == 0 || len(r.Tiers) > events.MaxTiers || r.Target == "" || r.WaitSeconds > 0) {
				t.Fatalf("accepted tiers %+v", r)
			}
			for _, tier := range r.Tiers {
				for k, v := range tier {
					if sv, ok := r.Selector[k]; k == "" || (ok && sv != v) {
						t.Fatalf("accepted tier %v against selector %v", tier, r.Selector)
					}
				}
			}
			b, _ := json.Marshal(r)
			again, ttl2, err := l.decodeAcquire(b)
			if err != nil || ttl2 != ttl || !maps.Equal(again.Selector, r.Selector) || again.Target != r.Target ||
				again.Holder != r.Holder || again.Sticky != r.Sticky || again.Strategy != r.Strategy ||
				again.SessionSeconds != r.SessionSeconds || again.StickyMode != r.StickyMode || again.WaitSeconds != r.WaitSeconds ||
				again.RequestID != r.RequestID || !slices.EqualFunc(again.Tiers, r.Tiers, maps.Equal) {
				t.Fatalf("round trip of %s: %+v %v", b, again, err)
			}
		}
		if r, id, err := l.decodeRenew(data); check("renew", err) && id.String() != r.ID {
			t.Fatalf("id %q parsed as %s", r.ID, id)
		}
		if r, id, err := decodeRelease(data); check("release", err) && id.String() != r.ID {
			t.Fatalf("id %q parsed as %s", r.ID, id)
		}
		if r, id, cd, err := l.decodeReport(data); check("report", err) {
			if id.String() != r.ID || (r.Result == events.ReportBlocked && r.Target == "") || (r.Result != events.ReportOK && cd <= 0) {
				t.Fatalf("accepted report %+v (cooldown %v)", r, cd)
			}
		}
	})
}

// FuzzReplyTimeout feeds arbitrary header values to the reply timeout's decoder: each is a
// timeout of 1 ms to 1 h or a 400 naming the header. None panics.
func FuzzReplyTimeout(f *testing.F) {
	for _, s := range []string{"3000", "0", "-1", "1", "3600000", "3600001", "9223372036854775807", "1e3", " 5", "", "soon"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := replyTimeout(map[string][]string{events.ReplyTimeoutHeader: {v}})
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.code != events.CodeBadRequest || ae.field != events.ReplyTimeoutHeader {
				t.Fatalf("%q: %v is not a 400 naming the header", v, err)
			}
			return
		}
		if d < time.Millisecond || d > time.Hour {
			t.Fatalf("%q: accepted %v", v, d)
		}
		if m := replyMargin(d); m <= 0 || m >= d {
			t.Fatalf("%q: margin %v of %v", v, m, d)
		}
	})
}
