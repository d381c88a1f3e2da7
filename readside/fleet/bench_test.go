package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/fleet/fleettest"
)

// BenchmarkLoad10k builds the model of 10,000 proxies (spec, status and health each, a
// lease on every third) from an embedded server, against a baseline in the same run: one
// kvstore.Latest of proxy_status alone, the least any reader of statuses pays. Report
// fleet.Load as a ratio to it; the absolute figures depend on the machine.
func BenchmarkLoad10k(b *testing.B) {
	const n = 10_000
	st := newStore(b)
	now := time.Now()
	fleettest.Large(b, st, n, now)
	ctx := context.Background()

	b.Run("baseline=Latest(proxy_status)", func(b *testing.B) {
		for b.Loop() {
			m, err := kvstore.Latest(ctx, st.Status)
			if err != nil || len(m) != n {
				b.Fatalf("%d entries, %v", len(m), err)
			}
		}
	})
	b.Run("fleet.Load", func(b *testing.B) {
		for b.Loop() {
			f := fleet.Load(ctx, fleet.FromStore(st), now)
			if len(f.Errors) != 0 || len(f.Rows) != n {
				b.Fatalf("%d rows, %v", len(f.Rows), f.Errors)
			}
		}
	})
	// The status page's read: the same, with every held slot decoded for its holders table.
	b.Run("fleet.Load+LeaseDetail", func(b *testing.B) {
		bk := fleet.FromStore(st)
		bk.LeaseDetail = true
		for b.Loop() {
			f := fleet.Load(ctx, bk, now)
			if len(f.Errors) != 0 || len(f.Leases.Rows) != (n+2)/3 {
				b.Fatalf("%d leases, %v", len(f.Leases.Rows), f.Errors)
			}
		}
	})
	// What egressd status holders costs:
	// every held slot decoded (a third of the fleet leased here).
	b.Run("fleet.LoadLeases", func(b *testing.B) {
		for b.Loop() {
			l := fleet.LoadLeases(ctx, st.Leases, now)
			if len(l.Errors) != 0 || len(l.Rows) != (n+2)/3 {
				b.Fatalf("%d leases, %v", len(l.Rows), l.Errors)
			}
		}
	})
}
