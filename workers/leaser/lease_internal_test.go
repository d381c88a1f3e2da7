package leaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
)

// A replica whose watch has not yet brought another replica's removal of a slot (here: a
// leaser that never watched at all) answers a renewal of the ended lease from the removal's
// marker: 410 with the reason, as the replica that removed it would; anything else that left
// the slot empty is a 404. A replica that heard of the grant and not of its end does the
// same: its view does not stand in for a slot whose removal came after the grant (an
// acquire's retry would be answered with a lease nobody holds).
func TestLeaseEndedElsewhereIsGoneBeforeTheWatchSaysSo(t *testing.T) {
	_, nc, js := kvstoretest.Start(t)
	ctx := context.Background()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Buckets: BucketsOf(store), NC: nc, Worker: "behind", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name    string
		noteFor string        // whose token the marker's note names ("own": this lease's); "" for a plain delete
		end     events.Reason // the note's reason
		put     bool          // whether the slot was ever written
		heard   bool          // whether this replica's view heard of the grant
		code    events.ErrorCode
	}{
		{"ended with its proxy", "own", events.ReasonProxyDeleted, true, false, events.CodeGone},
		{"ended with its instance", "own", events.ReasonProxyReplaced, true, false, events.CodeGone},
		{"released", "", "", true, false, events.CodeNotFound},
		{"another lease ended", "other", events.ReasonProxyDeleted, true, false, events.CodeNotFound},
		{"never granted", "", "", false, false, events.CodeNotFound},
		{"released, the grant heard here", "", "", true, true, events.CodeNotFound},
		{"ended with its proxy, the grant heard here", "own", events.ReasonProxyDeleted, true, true, events.CodeGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Tokens are unique to a lease, and what a replica remembers is keyed by them.
			id := leaseID{Proxy: "px", Slot: i, Token: fmt.Sprintf("tok%d", i)}
			key := events.SlotKey(id.Proxy, id.Slot)
			kv := store.Leases.Of(id.Proxy)
			if tc.put {
				lease := events.Lease{Proxy: id.Proxy, Slot: id.Slot, Token: id.Token}
				rev, err := kvstore.PutJSON(ctx, kv, key, lease)
				if err != nil {
					t.Fatal(err)
				}
				if tc.heard {
					l.view.noteLease(key, rev, lease)
				}
				var note []byte
				if token := tc.noteFor; token != "" {
					if token == "own" {
						token = id.Token
					}
					note, _ = json.Marshal(events.SlotEnd{V: 1, Token: token, End: tc.end})
				}
				if err := kvstore.DeleteNoted(ctx, js, kv, key, rev, note); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := l.readLeaseAfter(ctx, id, false)
			var ae *apiError
			if !errors.As(err, &ae) || ae.code != tc.code || ae.code == events.CodeGone && ae.end != tc.end {
				t.Fatalf("renewal read: %v (%+v), want code %d end %q", err, ae, tc.code, tc.end)
			}
		})
	}
}
