package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Leases is every held lease as of one read, and the same leases summed by holder: who has
// the fleet's proxies now. It is read on demand (egressd status leases|holders,
// /api/leases.json), not by Load, so that scrapes and page refreshes do not decode every slot.
type Leases struct {
	At      time.Time   `json:"at"`
	Rows    []LeaseRow  `json:"leases"`  // by holder, proxy, slot
	Holders []HolderRow `json:"holders"` // by leases held, most first, then name
	Errors  []ReadError `json:"-"`
}

// LeaseRow is one held slot. It carries neither the lease's ID nor its token: with them anyone
// who can read the view could renew or release a crawler's lease.
type LeaseRow struct {
	Proxy      string    `json:"proxy"`
	Slot       int       `json:"slot"`
	Holder     string    `json:"holder,omitempty"` // "" for a lease acquired without one
	Target     string    `json:"target,omitempty"`
	Sticky     string    `json:"sticky,omitempty"`
	Capped     bool      `json:"capped,omitempty"` // its holder is capped (leases.maxPerHolder): it holds a holder slot
	AcquiredAt time.Time `json:"acquiredAt,omitzero"`
	ExpiresAt  time.Time `json:"expiresAt,omitzero"`
}

// HolderRow sums one holder's leases.
type HolderRow struct {
	Holder   string `json:"holder"` // "" for leases acquired without one
	Leases   int    `json:"leases"`
	Proxies  int    `json:"proxies"`  // distinct proxies
	Targets  int    `json:"targets"`  // distinct targets named at acquire
	Sessions int    `json:"sessions"` // distinct sticky keys
	// Oldest is when the longest-held lease was acquired; NextExpiry the soonest a lease of
	// this holder runs out unless renewed.
	Oldest     time.Time `json:"oldest,omitzero"`
	NextExpiry time.Time `json:"nextExpiry,omitzero"`
}

// LoadLeases reads every lease shard in parallel: Load with the lease shards alone and
// LeaseDetail. A shard that cannot be read is in Errors (as proxy_leases, like Load) and its
// leases are missing; the rest is returned.
func LoadLeases(ctx context.Context, shards kvstore.LeaseShards, now time.Time) *Leases {
	return Load(ctx, Buckets{Leases: shards, LeaseDetail: true}, now).Leases
}

// newLeases sorts rows by holder, proxy and slot and sums them by holder; errs are the read's,
// of which only the lease shards' concern these rows.
func newLeases(now time.Time, rows []LeaseRow, errs []ReadError) *Leases {
	if rows == nil {
		rows = []LeaseRow{} // [] rather than null in JSON
	}
	slices.SortFunc(rows, func(a, b LeaseRow) int {
		return cmp.Or(strings.Compare(a.Holder, b.Holder), strings.Compare(a.Proxy, b.Proxy), cmp.Compare(a.Slot, b.Slot))
	})
	var leaseErrs []ReadError
	for _, e := range errs {
		if e.Bucket == events.BucketLeases {
			leaseErrs = append(leaseErrs, e)
		}
	}
	return &Leases{At: now, Rows: rows, Holders: byHolder(rows), Errors: leaseErrs}
}

// leaseRows decodes slot keys <proxy>.<slot>. A slot whose value does not decode is still
// held, so it is kept with what its key says; other keys (none today) are skipped.
func leaseRows(m map[string]jetstream.KeyValueEntry) []LeaseRow {
	out := make([]LeaseRow, 0, len(m))
	for key, e := range m {
		proxy, slot, ok := events.ParseSlotKey(key)
		if !ok {
			continue
		}
		r := LeaseRow{Proxy: proxy, Slot: slot}
		var l events.Lease
		if json.Unmarshal(e.Value(), &l) == nil {
			r.Holder, r.Target, r.Sticky, r.Capped = l.Holder, l.Target, l.Sticky, l.Hold != nil
			r.AcquiredAt, r.ExpiresAt = l.AcquiredAt, l.ExpiresAt
		}
		out = append(out, r)
	}
	return out
}

// byHolder sums rows, which are sorted by holder.
func byHolder(rows []LeaseRow) []HolderRow {
	out := []HolderRow{}
	for group := range chunkBy(rows, func(r LeaseRow) string { return r.Holder }) {
		h := HolderRow{Holder: group[0].Holder, Leases: len(group)}
		proxies, targets, sessions := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, r := range group {
			proxies[r.Proxy] = true
			if r.Target != "" {
				targets[r.Target] = true
			}
			if r.Sticky != "" {
				sessions[r.Sticky] = true
			}
			if !r.AcquiredAt.IsZero() && (h.Oldest.IsZero() || r.AcquiredAt.Before(h.Oldest)) {
				h.Oldest = r.AcquiredAt
			}
			if !r.ExpiresAt.IsZero() && (h.NextExpiry.IsZero() || r.ExpiresAt.Before(h.NextExpiry)) {
				h.NextExpiry = r.ExpiresAt
			}
		}
		h.Proxies, h.Targets, h.Sessions = len(proxies), len(targets), len(sessions)
		out = append(out, h)
	}
	slices.SortStableFunc(out, func(a, b HolderRow) int { return cmp.Compare(b.Leases, a.Leases) })
	return out
}

// chunkBy yields the runs of consecutive rows with the same key.
func chunkBy[T any](rows []T, key func(T) string) func(yield func([]T) bool) {
	return func(yield func([]T) bool) {
		for i := 0; i < len(rows); {
			j := i + 1
			for j < len(rows) && key(rows[j]) == key(rows[i]) {
				j++
			}
			if !yield(rows[i:j]) {
				return
			}
			i = j
		}
	}
}

// Of returns the rows of one holder ("" for leases without one).
func (l *Leases) Of(holder string) []LeaseRow {
	out := []LeaseRow{}
	for _, r := range l.Rows {
		if r.Holder == holder {
			out = append(out, r)
		}
	}
	return out
}
