package leaser_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Every bad request gets the right code and a body naming the problem, and changes nothing:
// no key of proxy_leases or proxy_cooldowns moves and no event is published.
func TestLeaseBadRequestsChangeNothing(t *testing.T) {
	r := newRig(t, nil)
	r.seed(proxy{name: "px-a", maxLeases: 1}, proxy{name: "px-b", maxLeases: 2})
	r.startLeasers(2)

	// A lost lease: granted, expired, and its slot granted again to someone else.
	lost := r.mustAcquire(events.AcquireRequest{Selector: map[string]string{}, TTLSeconds: 1, Holder: "old"})
	if lost.Proxy != "px-a" {
		t.Fatalf("leased %s", lost.Proxy)
	}
	var current events.LeaseGrant
	eventually(t, 5*time.Second, "px-a's slot 0 granted again", func() bool {
		g, rep := r.acquire(events.AcquireRequest{TTLSeconds: 300, Holder: "new"})
		if rep.code == 0 && g.Proxy != "px-a" {
			r.release(g.ID)
		}
		current = g
		return rep.code == 0 && g.Proxy == "px-a"
	})
	if !strings.HasPrefix(current.ID, "px-a.0.") || current.ID == lost.ID {
		t.Fatalf("regrant %s, lost %s", current.ID, lost.ID)
	}
	unknown := "px-b.1.0123456789abcdef"

	cases := []struct {
		name, subject, body string
		code                events.ErrorCode
		field, says         string
	}{
		{"acquire: bad JSON", events.LeaseAcquireSubject, `{"target":`, 400, "(document)", "JSON"},
		{"acquire: not JSON", events.LeaseAcquireSubject, `target=a`, 400, "(document)", "invalid JSON"},
		{"acquire: trailing data", events.LeaseAcquireSubject, `{"target":"a"}{}`, 400, "(document)", "trailing"},
		{"acquire: unknown field", events.LeaseAcquireSubject, `{"ttl":60}`, 400, "ttl", "unknown field"},
		{"acquire: miscased field", events.LeaseAcquireSubject, `{"TTLSeconds":60}`, 400, "TTLSeconds", "unknown field"},
		{"acquire: repeated field", events.LeaseAcquireSubject, `{"target":"a","target":"b"}`, 400, "target", "more than once"},
		{"acquire: null selector", events.LeaseAcquireSubject, `{"selector":null}`, 400, "selector", "null"},
		{"acquire: selector value not a string", events.LeaseAcquireSubject, `{"selector":{"geo":1}}`, 400, "selector", "must be a string"},
		{"acquire: ttl a string", events.LeaseAcquireSubject, `{"ttlSeconds":"60"}`, 400, "ttlSeconds", "integer"},
		{"acquire: ttl negative", events.LeaseAcquireSubject, `{"ttlSeconds":-5}`, 400, "ttlSeconds", "between 1 and 3600"},
		{"acquire: ttl too long", events.LeaseAcquireSubject, `{"ttlSeconds":3601}`, 400, "ttlSeconds", "between 1 and 3600"},
		{"acquire: ttl huge", events.LeaseAcquireSubject, `{"ttlSeconds":99999999999999}`, 400, "ttlSeconds", "between"},
		{"acquire: minAnonymity unknown", events.LeaseAcquireSubject, `{"minAnonymity":"high"}`, 400, "minAnonymity", `"anonymous" or "elite"`},
		{"acquire: minAnonymity transparent is no minimum", events.LeaseAcquireSubject, `{"minAnonymity":"transparent"}`, 400, "minAnonymity", `got "transparent"`},
		{"acquire: minAnonymity miscased", events.LeaseAcquireSubject, `{"minAnonymity":"Elite"}`, 400, "minAnonymity", "must be"},
		{"acquire: minAnonymity not a string", events.LeaseAcquireSubject, `{"minAnonymity":3}`, 400, "minAnonymity", "string"},
		{"acquire: requestId too long", events.LeaseAcquireSubject, `{"requestId":"` + strings.Repeat("r", 129) + `"}`, 400, "requestId", "at most 128 bytes"},
		{"acquire: requestId with a space", events.LeaseAcquireSubject, `{"requestId":"a b"}`, 400, "requestId", "printable ASCII"},
		{"acquire: requestId with a control byte", events.LeaseAcquireSubject, `{"requestId":"a\u0001"}`, 400, "requestId", "0x01"},
		{"acquire: requestId not a string", events.LeaseAcquireSubject, `{"requestId":7}`, 400, "requestId", "string"},
		{"acquire: strategy unknown", events.LeaseAcquireSubject, `{"strategy":"least-used"}`, 400, "strategy", `got "least-used"`},
		{"acquire: strategy miscased", events.LeaseAcquireSubject, `{"strategy":"Random"}`, 400, "strategy", "must be"},
		{"acquire: strategy not a string", events.LeaseAcquireSubject, `{"strategy":1}`, 400, "strategy", "string"},
		{"acquire: tiers without target", events.LeaseAcquireSubject, `{"tiers":[{"pool":"dc"}]}`, 400, "tiers", "need target"},
		{"acquire: tiers empty", events.LeaseAcquireSubject, `{"target":"a","tiers":[]}`, 400, "tiers", "1 to 8"},
		{"acquire: tiers too many", events.LeaseAcquireSubject, `{"target":"a","tiers":[{},{},{},{},{},{},{},{},{}]}`, 400, "tiers", "1 to 8"},
		{"acquire: a tier contradicts the selector", events.LeaseAcquireSubject, `{"target":"a","selector":{"pool":"x"},"tiers":[{"geo":"de"},{"pool":"dc"}]}`, 400, "tiers[1]", "contradicts"},
		{"acquire: a tier with an empty key", events.LeaseAcquireSubject, `{"target":"a","tiers":[{"":"dc"}]}`, 400, "tiers[0]", "keys must be"},
		{"acquire: a tier not an object", events.LeaseAcquireSubject, `{"target":"a","tiers":["dc"]}`, 400, "tiers[0]", "object"},
		{"acquire: tiers with waitSeconds", events.LeaseAcquireSubject, `{"target":"a","tiers":[{"pool":"dc"}],"waitSeconds":5}`, 400, "waitSeconds", "tiers"},
		{"acquire: sessionSeconds without sticky", events.LeaseAcquireSubject, `{"sessionSeconds":60}`, 400, "sessionSeconds", "needs sticky"},
		{"acquire: sessionSeconds negative", events.LeaseAcquireSubject, `{"sticky":"s","sessionSeconds":-1}`, 400, "sessionSeconds", "between 1 and 86400"},
		{"acquire: sessionSeconds too long", events.LeaseAcquireSubject, `{"sticky":"s","sessionSeconds":86401}`, 400, "sessionSeconds", "between 1 and 86400"},
		{"acquire: sessionSeconds a string", events.LeaseAcquireSubject, `{"sticky":"s","sessionSeconds":"60"}`, 400, "sessionSeconds", "integer"},
		{"acquire: stickyMode unknown", events.LeaseAcquireSubject, `{"sticky":"s","sessionSeconds":60,"stickyMode":"hard"}`, 400, "stickyMode", `got "hard"`},
		{"acquire: strict without a lifetime", events.LeaseAcquireSubject, `{"sticky":"s","stickyMode":"strict"}`, 400, "stickyMode", "needs sessionSeconds"},
		{"acquire: stickyMode without sticky", events.LeaseAcquireSubject, `{"stickyMode":"soft"}`, 400, "stickyMode", "needs sticky"},
		{"acquire: target too long", events.LeaseAcquireSubject, `{"target":"` + strings.Repeat("x", 600) + `"}`, 400, "target", "at most 512"},
		{"renew: no id", events.LeaseRenewSubject, `{}`, 400, "id", "required"},
		{"renew: malformed id", events.LeaseRenewSubject, `{"id":"px-a"}`, 400, "id", "<proxy>.<slot>.<token>"},
		{"renew: non-canonical slot", events.LeaseRenewSubject, `{"id":"px-b.01.0123456789abcdef"}`, 400, "id", "<proxy>.<slot>.<token>"},
		{"renew: ttl out of range", events.LeaseRenewSubject, `{"id":"` + current.ID + `","ttlSeconds":7200}`, 400, "ttlSeconds", "between"},
		{"renew: unknown field", events.LeaseRenewSubject, `{"id":"` + current.ID + `","holder":"x"}`, 400, "holder", "unknown field"},
		{"renew: unknown id", events.LeaseRenewSubject, `{"id":"` + unknown + `"}`, 404, "id", "unknown or has expired"},
		{"renew: lost lease", events.LeaseRenewSubject, `{"id":"` + lost.ID + `"}`, 409, "id", "its slot holds another lease now"},
		{"release: malformed id", events.LeaseReleaseSubject, `{"id":"px-a.0"}`, 400, "id", "<proxy>.<slot>.<token>"},
		{"release: bad JSON", events.LeaseReleaseSubject, `[]`, 400, "(document)", "object"},
		{"report: unknown result", events.LeaseReportSubject, `{"id":"` + current.ID + `","result":"meh"}`, 400, "result", "unknown"},
		{"report: no result", events.LeaseReportSubject, `{"id":"` + current.ID + `"}`, 400, "result", "required"},
		{"report: blocked without target", events.LeaseReportSubject, `{"id":"` + current.ID + `","result":"blocked"}`, 400, "target", "required"},
		{"report: negative cooldown", events.LeaseReportSubject, `{"id":"` + current.ID + `","result":"failed","cooldownSeconds":-1}`, 400, "cooldownSeconds", "between"},
		{"report: cooldown for ok", events.LeaseReportSubject, `{"id":"` + current.ID + `","result":"ok","cooldownSeconds":60}`, 400, "cooldownSeconds", "not ok"},
		{"report: malformed id", events.LeaseReportSubject, `{"id":"x.y.z","result":"ok"}`, 400, "id", "<proxy>.<slot>.<token>"},
		{"report: unknown id", events.LeaseReportSubject, `{"id":"` + unknown + `","result":"failed"}`, 404, "id", "unknown"},
		{"report: lost lease", events.LeaseReportSubject, `{"id":"` + lost.ID + `","result":"blocked","target":"a","release":true}`, 409, "id", "is not held: its slot holds another lease"},
	}

	// The setup's events arrive asynchronously (the lost lease's expiry last): the count is
	// taken once that expiry is seen and nothing more has come for half a second.
	seen, quietSince := -1, time.Now()
	eventually(t, 15*time.Second, "the setup's events to settle", func() bool {
		evs := r.seenEvents()
		if len(evs) != seen {
			seen, quietSince = len(evs), time.Now()
		}
		expired := slices.ContainsFunc(evs, func(ev events.Event) bool {
			return ev.Reason == events.ReasonExpired && ev.Lease != nil && ev.Lease.ID == lost.ID
		})
		return expired && time.Since(quietSince) >= 500*time.Millisecond
	})
	leasesBefore, coolBefore, eventsBefore := r.revisions(r.store.Leases.All()...), r.revisions(r.store.Cooldowns), len(r.seenEvents())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := r.call(tc.subject, []byte(tc.body))
			if rep.code != tc.code || rep.err.Field != tc.field || !strings.Contains(rep.err.Message, tc.says) {
				t.Fatalf("got %d field %q %q; want %d field %q saying %q", rep.code, rep.err.Field, rep.err.Message, tc.code, tc.field, tc.says)
			}
			if rep.header != rep.err.Message {
				t.Errorf("Nats-Service-Error %q differs from the body's message %q", rep.header, rep.err.Message)
			}
			if tc.code == 400 && tc.field != "(document)" && !strings.Contains(rep.err.Message, tc.field) {
				t.Errorf("message %q does not name %s", rep.err.Message, tc.field)
			}
		})
	}
	// Releasing an unknown or lost lease is not an error, and removes nothing.
	for _, id := range []string{unknown, lost.ID} {
		if r.release(id) {
			t.Errorf("release %s: released true", id)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if after := r.revisions(r.store.Leases.All()...); !maps.Equal(after, leasesBefore) {
		t.Errorf("proxy_leases changed: %v → %v", leasesBefore, after)
	}
	if after := r.revisions(r.store.Cooldowns); !maps.Equal(after, coolBefore) {
		t.Errorf("proxy_cooldowns changed: %v → %v", coolBefore, after)
	}
	if n := len(r.seenEvents()); n != eventsBefore {
		t.Errorf("%d events published by bad requests", n-eventsBefore)
	}
	if _, rep := r.renew(current.ID, 0); rep.code != 0 {
		t.Fatalf("the current holder's lease: %d %s", rep.code, rep.err.Message)
	}
}

// revisions maps every live key of kv to its revision.
func (r *rig) revisions(kvs ...jetstream.KeyValue) map[string]uint64 {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := map[string]uint64{}
	for _, kv := range kvs {
		l, err := kv.ListKeys(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		for k := range l.Keys() {
			e, err := kv.Get(ctx, k)
			if err == nil {
				out[kv.Bucket()+"/"+k] = e.Revision()
			}
		}
	}
	return out
}
