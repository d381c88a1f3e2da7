package provisioner

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaseKeyWriter is a provider that can replace the lease keys of its running proxies (the
// local provider: the key file each proxy re-reads). Through it a master rotation reaches the
// proxies (decision 88); a provider without it delivers keys only with a create.
type LeaseKeyWriter interface {
	// LeaseKeys are the key sets its lease-mode instances hold now, by instance name.
	LeaseKeys(ctx context.Context) (map[string]leaseauth.KeySet, error)
	// WriteLeaseKeys replaces the keys of the instance named name.
	WriteLeaseKeys(ctx context.Context, name string, keys leaseauth.KeySet) error
}

// LeaseKeys keeps every lease-mode proxy of one provider holding the keys of exactly the
// masters the installation accepts (its Source, re-read from NATS by its owner), and reports
// which masters each proxy's keys derive from in egress_locks (events.LeaseKeysKey), where a
// rotation looks before it switches. Each pass compares and rewrites only what differs, so a
// pass cut short by a crash is finished by the next one.
type LeaseKeys struct {
	Provider string
	Worker   string
	Source   leaseauth.Source
	Writer   LeaseKeyWriter
	Locks    jetstream.KeyValue // where the report goes
	Log      *slog.Logger
	Interval time.Duration // between passes; default 2 s
	// Observe, optional, is told after each pass how many instances hold keys of each master
	// and the rotation phase (metrics).
	Observe func(phase string, holders map[string]int)
	Now     func() time.Time
}

// Run makes a pass every Interval until ctx ends. A failed pass is logged and retried at the
// next: the proxies keep the keys they hold meanwhile.
func (k LeaseKeys) Run(ctx context.Context) error {
	k.Interval = cmp.Or(k.Interval, 2*time.Second)
	if k.Now == nil {
		k.Now = time.Now
	}
	var last []events.ProxyLeaseKeys
	var lastRing string
	t := time.NewTicker(k.Interval)
	defer t.Stop()
	for {
		held, err := k.pass(ctx)
		if err != nil && ctx.Err() == nil {
			k.Log.Warn("deliver lease keys; proxies keep the keys they hold; retrying", "err", err)
		}
		if held != nil && k.Observe != nil {
			k.Observe(phaseOf(k.Source), events.LeaseKeysReport{Proxies: held}.Holding())
		}
		// What the proxies hold is reported even after a pass that failed in part: it is true.
		ring := phaseOf(k.Source) + " " + strings.Join(idsOf(k.Source.Accepted()), ",")
		if held != nil && (last == nil || ring != lastRing || !slices.EqualFunc(held, last, equalHolding)) {
			if err := k.report(ctx, held); err != nil {
				k.Log.Warn("report lease keys", "err", err)
			} else {
				last, lastRing = held, ring
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pass delivers what differs and returns what every instance holds afterwards.
func (k LeaseKeys) pass(ctx context.Context) ([]events.ProxyLeaseKeys, error) {
	masters := k.Source.Accepted()
	sets, err := k.Writer.LeaseKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list lease keys: %w", err)
	}
	held := make([]events.ProxyLeaseKeys, 0, len(sets))
	var failed []string
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		set := sets[name]
		if want := idsOf(masters); len(masters) > 0 && !slices.Equal(set.IDs(), want) {
			next, err := leaseauth.NewKeySet(leaseauth.InstanceKeys(k.Source, set.Proxy(), set.Instance())...)
			if err == nil {
				err = k.Writer.WriteLeaseKeys(ctx, name, next)
			}
			if err != nil {
				failed = append(failed, name)
				k.Log.Warn("deliver lease keys", "instance", name, "err", err)
			} else {
				k.Log.Info("lease keys delivered", "proxy", set.Proxy(), "instance", name, "masters", strings.Join(want, ","))
				set = next
			}
		}
		held = append(held, events.ProxyLeaseKeys{Proxy: set.Proxy(), Generation: set.Instance(), Instance: name, KeyIDs: set.IDs()})
	}
	if len(failed) > 0 {
		return held, fmt.Errorf("%d instances kept their keys: %s", len(failed), strings.Join(failed, ", "))
	}
	return held, nil
}

func (k LeaseKeys) report(ctx context.Context, held []events.ProxyLeaseKeys) error {
	rec := events.LeaseKeysReport{V: 1, Provider: k.Provider, Worker: k.Worker, At: k.Now().UTC(), Phase: phaseOf(k.Source),
		Masters: idsOf(k.Source.Accepted()), Proxies: held}
	_, err := kvstore.PutJSON(ctx, k.Locks, events.LeaseKeysKey(k.Provider), rec)
	return err
}

// phaseOf is the rotation phase of a ring source; a fixed master is steady.
func phaseOf(src leaseauth.Source) string {
	if r, ok := src.(interface{ Ring() leaseauth.Ring }); ok {
		return r.Ring().Phase()
	}
	return leaseauth.PhaseSteady
}

func idsOf(masters []leaseauth.Master) []string {
	ids := make([]string, len(masters))
	for i, m := range masters {
		ids[i] = m.ID()
	}
	return ids
}

func equalHolding(a, b events.ProxyLeaseKeys) bool {
	return a.Proxy == b.Proxy && a.Generation == b.Generation && a.Instance == b.Instance && slices.Equal(a.KeyIDs, b.KeyIDs)
}
