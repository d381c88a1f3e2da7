package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// leaseMasterPoll is how often the roles that sign or deliver with the lease masters re-read
// them (their NATS users may read the one key, not watch it): a rotation step reaches every
// process within it, and the retirement waits for it twice over (leaseMasterMargin).
const leaseMasterPoll = 2 * time.Second

// leaseMasterMargin is what a retirement waits beyond the longest token's expiry and the
// skew: a leaser that had not yet re-read the ring at the switch signed with the previous
// master for up to one poll.
const leaseMasterMargin = 5 * leaseMasterPoll

// buildLeaseMasters keeps d.leaseKeys the ring in NATS: the leasers and probers sign with its
// current master, the provisioners deliver keys of every master it accepts. A failed read
// keeps the last ring (signing goes on; nothing is delivered that was not before).
func buildLeaseMasters(_ context.Context, d *daemon) (runner, error) {
	return func(ctx context.Context) error {
		t := time.NewTicker(leaseMasterPoll)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ring, err := readLeaseMaster(rctx, d.store)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				failing = true
				d.log.Warn("re-read the lease masters; keeping the last ones", "err", err)
			case err == nil:
				failing = false
				if old := d.leaseKeys.Ring(); !slices.Equal(old.IDs(), ring.IDs()) || old.Phase() != ring.Phase() {
					d.log.Info("lease masters changed", "phase", ring.Phase(), "signing", ring.Current.ID(), "accepted", strings.Join(ring.IDs(), ","))
				}
				d.leaseKeys.Set(ring)
			}
		}
	}, nil
}

// leaseProxy is a lease-mode proxy with an instance, and the masters its keys derive from as
// its provider last reported them.
type leaseProxy struct {
	Name       string   `json:"name"`
	Provider   string   `json:"provider"`
	Generation string   `json:"generation"`
	Phase      string   `json:"phase"`
	KeyIDs     []string `json:"keyIds"`        // none: no report of this instance
	Why        string   `json:"why,omitempty"` // what keeps it from holding the spreading master
}

// leaseMasterState is what `egressd lease-master status` shows: master IDs, never a master.
type leaseMasterState struct {
	Phase       string       `json:"phase"`
	Current     string       `json:"current"`
	Next        string       `json:"next,omitempty"`
	Previous    string       `json:"previous,omitempty"`
	Since       time.Time    `json:"since,omitzero"`
	RetireAfter time.Time    `json:"retireAfter,omitzero"`
	Proxies     []leaseProxy `json:"proxies"`
	Waiting     []string     `json:"waiting,omitempty"` // spreading: the proxies that lack the next master
}

// stateOf folds the ring, the lease-mode proxies and the provisioners' reports.
func stateOf(ring leaseauth.Ring, proxies []leaseProxy, reports map[string]events.LeaseKeysReport) leaseMasterState {
	st := leaseMasterState{Phase: ring.Phase(), Current: ring.Current.ID(), Since: ring.Since, RetireAfter: ring.RetireAfter}
	if !ring.Next.IsZero() {
		st.Next = ring.Next.ID()
	}
	if !ring.Previous.IsZero() {
		st.Previous = ring.Previous.ID()
	}
	for _, p := range proxies {
		rep, ok := reports[p.Provider]
		if ok {
			if i := slices.IndexFunc(rep.Proxies, func(h events.ProxyLeaseKeys) bool {
				return h.Proxy == p.Name && h.Generation == p.Generation
			}); i >= 0 {
				p.KeyIDs = rep.Proxies[i].KeyIDs
			}
		}
		if st.Next != "" && !slices.Contains(p.KeyIDs, st.Next) {
			switch {
			case !ok:
				p.Why = "its provider " + p.Provider + " reports no lease keys: it cannot deliver keys to a running proxy (replace the proxy, or switch with --force)"
			case p.KeyIDs == nil:
				p.Why = "its provider has not reported this instance yet"
			default:
				p.Why = "not delivered yet"
			}
			st.Waiting = append(st.Waiting, p.Name)
		}
		st.Proxies = append(st.Proxies, p)
	}
	return st
}

// loadLeaseMasterState reads the ring, every lease-mode proxy with an instance, and the reports.
func loadLeaseMasterState(ctx context.Context, js jetstream.JetStream) (leaseMasterState, uint64, leaseauth.Ring, error) {
	var zero leaseMasterState
	locks, err := js.KeyValue(ctx, events.BucketLocks)
	if err != nil {
		return zero, 0, leaseauth.Ring{}, fmt.Errorf("bind bucket %s (has `egressd setup` run?): %w", events.BucketLocks, err)
	}
	ring, rev, err := readLeaseRing(ctx, locks)
	if err != nil {
		return zero, 0, ring, err
	}
	proxies, err := leaseModeProxies(ctx, js)
	if err != nil {
		return zero, 0, ring, err
	}
	reports := map[string]events.LeaseKeysReport{}
	for _, p := range proxies {
		if _, seen := reports[p.Provider]; seen {
			continue
		}
		var rep events.LeaseKeysReport
		if _, err := kvstore.GetJSON(ctx, locks, events.LeaseKeysKey(p.Provider), &rep); err == nil {
			reports[p.Provider] = rep
		} else if !errors.Is(err, kvstore.ErrNotFound) {
			return zero, 0, ring, fmt.Errorf("read the lease keys of provider %s: %w", p.Provider, err)
		}
	}
	return stateOf(ring, proxies, reports), rev, ring, nil
}

// leaseModeProxies are the proxies whose spec says auth.mode lease and whose status names an
// instance (a generation): those that must hold a master's keys before it signs.
func leaseModeProxies(ctx context.Context, js jetstream.JetStream) ([]leaseProxy, error) {
	specsKV, err := js.KeyValue(ctx, events.BucketProxies)
	if err != nil {
		return nil, err
	}
	statusKV, err := js.KeyValue(ctx, events.BucketStatus)
	if err != nil {
		return nil, err
	}
	specs, err := kvstore.Latest(ctx, specsKV)
	if err != nil {
		return nil, fmt.Errorf("read proxies: %w", err)
	}
	statuses, err := kvstore.Latest(ctx, statusKV)
	if err != nil {
		return nil, fmt.Errorf("read statuses: %w", err)
	}
	var out []leaseProxy
	for name, e := range specs {
		spec, err := schemas.ParseProxySpec(e.Value())
		if err != nil || !spec.Auth.Lease() {
			continue
		}
		se, ok := statuses[name]
		if !ok {
			continue
		}
		var st events.ProxyStatus
		if json.Unmarshal(se.Value(), &st) != nil || st.Generation == "" {
			continue
		}
		out = append(out, leaseProxy{Name: name, Provider: spec.Provider, Generation: st.Generation, Phase: string(st.Phase)})
	}
	slices.SortFunc(out, func(a, b leaseProxy) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
