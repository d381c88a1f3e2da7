package leaser

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/tracing"
	"github.com/egressd/egressd/workers/leaser/httpface"
	"github.com/egressd/egressd/workers/leaser/selection"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// ServiceVersion is the micro service version; it follows the wire contract in docs/leases.md.
const ServiceVersion = "1.0.0"

// Config of one leaser replica. Zero durations take the defaults below.
type Config struct {
	Buckets Buckets    // BucketsOf(store)
	NC      *nats.Conn // serves the micro service and publishes probe requests
	Worker  string     // this process's identity, in the service metadata; default host-pid

	// TTLs a request may ask for: ttlSeconds must lie in [MinTTL, MaxTTL]; 0 means DefaultTTL
	// on acquire and the lease's own TTL on renew. Whole seconds.
	MinTTL     time.Duration // default 5s
	DefaultTTL time.Duration // default 5m
	MaxTTL     time.Duration // default 1h

	// Cooldowns a report sets when it names none. A block is a site's verdict on an egress
	// address and tends to last, so BlockedCooldown is the longer; a failure also triggers a
	// probe that takes the proxy out (phase Unhealthy) if it is really broken, so
	// FailedCooldown only has to bridge the time until that verdict.
	BlockedCooldown time.Duration // default 10m
	FailedCooldown  time.Duration // default 5m
	MaxCooldown     time.Duration // default 24h; cooldownSeconds above it is refused
	// Escalation lengthens the cooldowns of repeated blocks on one target (strikes.go).
	Escalation Escalation
	// Neighbours cools a blocked proxy's neighbours for the target too (neighbours.go).
	Neighbours Neighbours
	// Pace is the least time between two grants of one proxy for one target when an acquire
	// names none (pace.go); 0: no pacing. Whole seconds, at most MaxPace.
	Pace time.Duration
	// BestForTarget tunes the best-for-target strategy (selection/best.go): how fast what a
	// proxy did for a target fades, and the share of acquires that explore. Zero: the
	// defaults (an hour, a tenth).
	BestForTarget BestForTarget
	// Tiers tunes the tiers of acquires that name them (tiers.go).
	Tiers Tiers

	// MaxPerHolder caps the leases one holder may hold at once on the proxies of one pool
	// (and on the proxies in no pool), exactly across replicas; a pool's leases.maxPerHolder
	// overrides it for its members. 0: no cap. docs/leases.md#per-holder-caps.
	MaxPerHolder int

	// MaxWait bounds an acquire's waitSeconds (wait.go); default DefaultMaxWait, at most
	// MaxWaitLimit, whole seconds; WaitsOff refuses waits.
	MaxWait time.Duration

	RequestBudget time.Duration // all the KV calls of one request together; default 5s
	// SlotWriteBudget bounds one write to a lease shard (and an acquire's request record)
	// when there are several lease shards: past it, or on an error, the shard counts as
	// stalled, and the acquire moves on to a proxy of another shard (shards.go).
	SlotWriteBudget time.Duration // default DefaultSlotWriteBudget
	ShutdownBudget  time.Duration // for requests in flight when Run's context ends; default 5s

	// StatsInterval is how often the replica publishes its sums of the lease traffic to
	// EGRESS_LEASE_STATS (docs/events.md); default DefaultStatsInterval. RawEvents says
	// which lease events are also published one by one; default events.RawEnds.
	StatsInterval time.Duration
	RawEvents     events.RawLeaseEvents

	// DemandWindow is the sliding window the demand records count refusals and grants over;
	// DemandInterval how often the replica writes them to pool_demand (demand.go). Defaults
	// DefaultDemandWindow and DefaultDemandInterval.
	DemandWindow   time.Duration
	DemandInterval time.Duration

	// HTTP, when set, also serves the endpoints as JSON over HTTP (package httpface, face.go).
	HTTP *HTTPConfig

	Log      *slog.Logger
	Now      func() time.Time     // record timestamps; expiry itself runs on the server's clock
	Observer Observer             // optional: counts requests (metrics)
	Tracing  trace.TracerProvider // optional: nil is the global provider (docs/tracing.md)

	// LeaseMaster signs the credentials of leases on proxies whose auth.mode is "lease"
	// (credentials.go). egressd always sets it; without it such leases carry tokens no
	// proxy accepts (and the probers, lacking it too, keep such proxies from being Ready).
	LeaseMaster leaseauth.Source
}

// Observer counts what leaves no state behind (metrics). *metrics.Metrics implements it.
// endpoint is acquire, renew, release or report; result is "granted" (acquire) or "ok" on
// success, else bad_request, not_found, conflict, gone, holder_at_cap, unavailable or error.
type Observer interface {
	ObserveLease(endpoint, result string, d time.Duration)
}

type noObserver struct{}

func (noObserver) ObserveLease(string, string, time.Duration) {}

// Defaults.
const (
	DefaultMinTTL          = 5 * time.Second
	DefaultDefaultTTL      = 5 * time.Minute
	DefaultMaxTTL          = time.Hour
	DefaultBlockedCooldown = 10 * time.Minute
	DefaultFailedCooldown  = 5 * time.Minute
	DefaultMaxCooldown     = 24 * time.Hour
	DefaultStatsInterval   = time.Minute
)

// Leaser is one replica of the lease service.
type Leaser struct {
	cfg      Config
	log      *slog.Logger
	view     *view
	shards   *shardHealth
	fresh    *freshness // whether the lease shards' watches echo this replica's writes (fresh.go)
	emitter  *emitter
	stats    *stats
	demand   *demandBook
	inflight atomic.Int64
	gate     *gate          // runs the NATS requests side by side (concurrent.go)
	creating *creating      // slots whose Create is in flight here (inflight.go)
	tries    *tries         // request IDs an acquire serves here now (inflight.go)
	streams  sync.Map       // lease shard bucket → its stream's handle (lease.go, shardStream)
	wake     *wakeup        // this replica's waiting acquires (wait.go)
	waiters  sync.WaitGroup // the goroutines answering them over NATS
	quit     chan struct{}  // closed when Run's context ends: waiters answer and go
	hbMu     sync.Mutex     // the waiting heartbeat (waitqueue.go)
	hbAt     time.Time
	ready    chan struct{}
	tracer   trace.Tracer
	face     *httpface.Face // nil without Config.HTTP
}

// New checks the config and applies defaults; it does no I/O.
func New(cfg Config) (*Leaser, error) {
	if !cfg.Buckets.complete() || cfg.NC == nil {
		return nil, errors.New("leaser: buckets and NATS connection are required")
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	log := cfg.Log.With("role", "leaser", "worker", cfg.Worker)
	l := &Leaser{cfg: cfg, log: log, view: newView(cfg.MaxPerHolder), shards: newShardHealth(cfg.Buckets.Leases, cfg.Buckets.LeaseState, cfg.SlotWriteBudget),
		fresh:   newFreshness(cfg.Buckets.Leases.Len()),
		emitter: newEmitter(cfg.Buckets.JS, log), ready: make(chan struct{}), wake: newWakeup(), quit: make(chan struct{}), creating: newCreating(), tries: newTries(), tracer: tracing.Tracer(cfg.Tracing),
		stats: newStats(cfg.Buckets.JS, log, newMemberID(), cfg.StatsInterval, cfg.Now), demand: newDemandBook(cfg.DemandWindow, cfg.Now)}
	l.view.fleet.SetNeighbourhood(cfg.Neighbours.Neighbourhood)
	l.view.fleet.SetLearning(selection.Learning{HalfLife: cfg.BestForTarget.HalfLife, Explore: *cfg.BestForTarget.Explore})
	if cfg.HTTP != nil {
		l.face = httpface.New(*cfg.HTTP, httpService{l}, log)
	}
	return l, nil
}

// fill sets the defaults of what cfg leaves zero and checks the rest.
func (cfg *Config) fill() error {
	cfg.MinTTL, cfg.DefaultTTL = cmp.Or(cfg.MinTTL, DefaultMinTTL), cmp.Or(cfg.DefaultTTL, DefaultDefaultTTL)
	cfg.MaxTTL = cmp.Or(cfg.MaxTTL, DefaultMaxTTL)
	cfg.BlockedCooldown = cmp.Or(cfg.BlockedCooldown, DefaultBlockedCooldown)
	cfg.FailedCooldown = cmp.Or(cfg.FailedCooldown, DefaultFailedCooldown)
	cfg.MaxCooldown = cmp.Or(cfg.MaxCooldown, DefaultMaxCooldown)
	cfg.RequestBudget = cmp.Or(cfg.RequestBudget, 5*time.Second)
	cfg.SlotWriteBudget = cmp.Or(cfg.SlotWriteBudget, DefaultSlotWriteBudget)
	cfg.ShutdownBudget = cmp.Or(cfg.ShutdownBudget, 5*time.Second)
	for _, d := range []time.Duration{cfg.MinTTL, cfg.DefaultTTL, cfg.MaxTTL, cfg.BlockedCooldown, cfg.FailedCooldown, cfg.MaxCooldown} {
		if d < time.Second || d%time.Second != 0 {
			return fmt.Errorf("leaser: TTLs and cooldowns must be whole seconds of at least 1s, got %v", d)
		}
	}
	if cfg.MinTTL > cfg.DefaultTTL || cfg.DefaultTTL > cfg.MaxTTL {
		return fmt.Errorf("leaser: need MinTTL ≤ DefaultTTL ≤ MaxTTL, got %v, %v, %v", cfg.MinTTL, cfg.DefaultTTL, cfg.MaxTTL)
	}
	if err := cfg.checkCooldowns(); err != nil {
		return err
	}
	if err := cfg.BestForTarget.check(); err != nil {
		return err
	}
	if err := cfg.Tiers.check(); err != nil {
		return err
	}
	if cfg.StatsInterval == 0 {
		cfg.StatsInterval = DefaultStatsInterval
	}
	if cfg.StatsInterval < time.Second {
		return fmt.Errorf("leaser: the statistics interval must be at least 1s, got %v", cfg.StatsInterval)
	}
	cfg.DemandWindow = cmp.Or(cfg.DemandWindow, DefaultDemandWindow)
	cfg.DemandInterval = cmp.Or(cfg.DemandInterval, DefaultDemandInterval)
	if cfg.DemandWindow < time.Second || cfg.DemandWindow%time.Second != 0 || cfg.DemandInterval < time.Second {
		return fmt.Errorf("leaser: the demand window must be whole seconds and the demand interval at least 1s, got %v and %v", cfg.DemandWindow, cfg.DemandInterval)
	}
	if cfg.RawEvents == "" {
		cfg.RawEvents = events.RawEnds
	}
	if !slices.Contains(events.RawLeaseEventModes, cfg.RawEvents) {
		return fmt.Errorf("leaser: raw lease events %q: want one of %v", cfg.RawEvents, events.RawLeaseEventModes)
	}
	if cfg.HTTP != nil {
		hc := *cfg.HTTP
		if err := hc.Check(); err != nil {
			return err
		}
		cfg.HTTP = &hc
	}
	if cfg.MaxPerHolder < 0 || cfg.MaxPerHolder > MaxPerHolderLimit {
		return fmt.Errorf("leaser: MaxPerHolder must be between 0 and %d, got %d", MaxPerHolderLimit, cfg.MaxPerHolder)
	}
	switch {
	case cfg.MaxWait == 0:
		cfg.MaxWait = DefaultMaxWait
	case cfg.MaxWait == WaitsOff:
	case cfg.MaxWait < time.Second || cfg.MaxWait > MaxWaitLimit || cfg.MaxWait%time.Second != 0:
		return fmt.Errorf("leaser: MaxWait must be whole seconds between 1s and %v (or WaitsOff), got %v", MaxWaitLimit, cfg.MaxWait)
	}
	if cfg.Worker == "" {
		h, _ := os.Hostname()
		cfg.Worker = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	return nil
}

// Ready is closed once the replica serves requests (its view is complete); for health checks
// and tests.
func (l *Leaser) Ready() <-chan struct{} { return l.ready }

func (l *Leaser) now() time.Time { return l.cfg.Now().UTC() }
