package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamLimits bound one event stream; the oldest events go first when either is reached.
// A zero field takes its default.
type StreamLimits struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// EventLimits are the limits of the history streams: the lifecycle history (every kind but
// the lease kinds, on EGRESS_EVENTS), the raw lease events (EGRESS_LEASE_EVENTS) and the
// leasers' per-interval sums of them (EGRESS_LEASE_STATS).
type EventLimits struct {
	Lifecycle StreamLimits
	Leases    StreamLimits
	Stats     StreamLimits
}

// Defaults. The lifecycle history is a few events per proxy per day, so a month fits in a
// modest cap. Raw lease events come at the rate of lease cycles (one per lease in the
// default raw mode) and are for following a recent lease: a day, and on a busy fleet the
// byte cap binds long before (at 2,900 cycles a second 128 MiB is about two and a half
// minutes). The statistics are the lease traffic's long history: a row per proxy, target and
// leaser replica each interval, 110 to 150 bytes, so 256 MiB is about two million rows, a
// month of 45 proxy-target pairs busy every minute; a larger fleet keeps the newest (10,000
// busy pairs: about three hours) unless the cap is raised. JetStream reserves each stream's
// MaxBytes against the server's max_file_store, so together they stay under 1 GiB.
const (
	DefaultLifecycleMaxAge   = 30 * 24 * time.Hour
	DefaultLifecycleMaxBytes = 512 << 20
	DefaultLeaseMaxAge       = 24 * time.Hour
	DefaultLeaseMaxBytes     = 128 << 20
	DefaultStatsMaxAge       = 30 * 24 * time.Hour
	DefaultStatsMaxBytes     = 256 << 20
)

// Smallest limits accepted. The age must cover the duplicate window (the server refuses a
// stream whose MaxAge is shorter); the byte floor only keeps a typo from emptying a stream.
const (
	MinEventsMaxAge   = eventsDuplicates
	MinEventsMaxBytes = 64 << 10
)

// eventsDuplicates is the duplicate window of both event streams: every event is published
// with its ID as Nats-Msg-Id.
const eventsDuplicates = 2 * time.Minute

// WithDefaults fills the zero fields.
func (l EventLimits) WithDefaults() EventLimits {
	fill := func(s *StreamLimits, age time.Duration, bytes int64) {
		if s.MaxAge == 0 {
			s.MaxAge = age
		}
		if s.MaxBytes == 0 {
			s.MaxBytes = bytes
		}
	}
	fill(&l.Lifecycle, DefaultLifecycleMaxAge, DefaultLifecycleMaxBytes)
	fill(&l.Leases, DefaultLeaseMaxAge, DefaultLeaseMaxBytes)
	fill(&l.Stats, DefaultStatsMaxAge, DefaultStatsMaxBytes)
	return l
}

// Validate names the first bad limit, by the config key it comes from.
func (l EventLimits) Validate() error {
	var errs []error
	check := func(name string, s StreamLimits) {
		if s.MaxAge != 0 && s.MaxAge < MinEventsMaxAge {
			errs = append(errs, fmt.Errorf("events.%s.maxAge: must be at least %s, got %s", name, MinEventsMaxAge, s.MaxAge))
		}
		if s.MaxBytes != 0 && s.MaxBytes < MinEventsMaxBytes {
			errs = append(errs, fmt.Errorf("events.%s.maxBytes: must be at least %d (64KiB), got %d", name, MinEventsMaxBytes, s.MaxBytes))
		}
	}
	check("lifecycle", l.Lifecycle)
	check("leases", l.Leases)
	check("stats", l.Stats)
	return errors.Join(errs...)
}

// EventStreamConfigs are the history streams as Ensure declares them.
func EventStreamConfigs(replicas int, l EventLimits) []jetstream.StreamConfig {
	l = l.WithDefaults()
	mk := func(name, desc string, s StreamLimits) jetstream.StreamConfig {
		subjects := events.EventStreamSubjects(name)
		if name == events.StreamLeaseStats {
			subjects = []string{events.LeaseStatsSubjects}
		}
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    subjects,
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      s.MaxAge,
			MaxBytes:    s.MaxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
			Duplicates:  eventsDuplicates,
		}
	}
	return []jetstream.StreamConfig{
		mk(events.StreamEvents, "egressd lifecycle events: phases, op results, health, gc, providers, pools", l.Lifecycle),
		mk(events.StreamLeaseEvents, "egressd lease events: grants, renewals, releases, expiries, reports", l.Leases),
		mk(events.StreamLeaseStats, "egressd lease statistics: each leaser's sums per proxy and target per interval", l.Stats),
	}
}

// ensureEventStreams declares the history streams. EGRESS_EVENTS of an older egressd captured
// every event (egress.events.>), so its subjects overlap the lease stream's and must be
// narrowed first; its lease events are purged then, since no reader looks for them there
// any more and the new, longer lifecycle MaxAge would otherwise keep them for a month.
func ensureEventStreams(ctx context.Context, js jetstream.JetStream, replicas int, l EventLimits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	cfgs := EventStreamConfigs(replicas, l)
	if err := narrowOldEvents(ctx, js); err != nil {
		return err
	}
	for _, c := range cfgs {
		if _, err := declare(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateOrUpdateStream(ctx, c) }); err != nil {
			return fmt.Errorf("declare stream %s: %w", c.Name, err)
		}
	}
	return nil
}

// narrowOldEvents purges the lease kinds from an EGRESS_EVENTS that still captures them. The
// purge comes before the subjects change because the server refuses a purge filter outside
// the stream's subjects; a lease event stored in between is purged by the next setup, or
// ages out.
func narrowOldEvents(ctx context.Context, js jetstream.JetStream) error {
	s, err := js.Stream(ctx, events.StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read stream %s: %w", events.StreamEvents, err)
	}
	if !slices.Contains(s.CachedInfo().Config.Subjects, events.EventsSubjects) {
		return nil
	}
	for _, subj := range events.EventStreamSubjects(events.StreamLeaseEvents) {
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return fmt.Errorf("purge %s from stream %s: %w", subj, events.StreamEvents, err)
		}
	}
	return nil
}
