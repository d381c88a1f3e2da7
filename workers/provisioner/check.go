package provisioner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers"
	"github.com/nats-io/nats.go/jetstream"
)

// Checks configure provider health checks (issue 4): one round per Interval, bounded by
// min(15 s, Interval), run by one provisioner of the provider per round.
type Checks struct {
	Interval time.Duration // 0 disables; otherwise at least 10 s in production
}

// DefaultChecks is the production setting.
func DefaultChecks() Checks { return Checks{Interval: time.Minute} }

// MinCheckInterval is the shortest interval `egressd run` accepts.
const MinCheckInterval = 10 * time.Second

const maxMessage = 1024

func (c Checks) timeout() time.Duration { return min(15*time.Second, c.Interval) }

func (p *Provisioner) checkLoop(ctx context.Context) {
	checker, ok := p.cfg.Backend.(providers.Checker)
	if !ok || p.cfg.Checks.Interval <= 0 {
		return
	}
	// A round that outlives its timeout is reported as Timeout; its goroutine is still owned
	// here, and no new round starts until it has returned.
	var running chan struct{}
	t := time.NewTimer(0)
	defer t.Stop()
	defer func() {
		if running != nil {
			<-running
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(p.cfg.Checks.Interval)
		if running != nil {
			select {
			case <-running:
				running = nil
			default:
				continue // the previous round still hangs; it was already reported
			}
		}
		lock, err := kvstore.AcquireLock(ctx, p.cfg.Buckets.JS, p.cfg.Buckets.Locks, events.CheckLockKey(p.cfg.Provider), p.cfg.Worker, "check", max(p.cfg.Checks.Interval*9/10, time.Second))
		if err != nil {
			continue // another provisioner of this provider checks this round
		}
		_ = lock // left to expire: it marks the round as taken
		running = p.checkRound(ctx, checker)
	}
}

// checkRound runs one Check and records its verdicts; it returns a channel closed when the
// Check call has returned.
func (p *Provisioner) checkRound(ctx context.Context, checker providers.Checker) chan struct{} {
	timeout := p.cfg.Checks.timeout()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	done := make(chan struct{})
	results := make(chan []providers.TargetStatus, 1)
	go func() {
		defer close(done)
		defer cancel()
		results <- checker.Check(cctx)
	}()
	start := time.Now()
	var got []providers.TargetStatus
	returned := false
	select {
	case got = <-results:
		returned = true
	case <-time.After(timeout):
		cancel()
	case <-ctx.Done():
		return done
	}
	if !returned {
		// Hung: every known target is reported as timed out.
		for _, h := range p.cfg.Catalog.Hosts {
			got = append(got, providers.TargetStatus{Name: h.Name, Reason: providers.CheckTimeout,
				Message: fmt.Sprintf("check did not return within %s", timeout), Latency: time.Since(start)})
		}
	}
	for i, ts := range got {
		p.recordTarget(ctx, i, ts)
	}
	return done
}

func (p *Provisioner) recordTarget(ctx context.Context, order int, ts providers.TargetStatus) {
	key := p.cfg.Provider + "." + ts.Name
	now := time.Now().UTC()
	var prev events.TargetHealth
	_, err := kvstore.GetJSON(ctx, p.cfg.Buckets.Providers, key, &prev)
	had := err == nil
	rec := events.TargetHealth{V: 1, Provider: p.cfg.Provider, Target: ts.Name, Order: order, Address: ts.Address,
		Ready: ts.Ready, Reason: string(ts.Reason), Message: truncate(ts.Message, maxMessage),
		LatencyMs: float64(ts.Latency.Microseconds()) / 1000, Details: ts.Details, CheckedAt: now,
		LastTransitionTime: now, Checker: p.cfg.Worker}
	if had && prev.Ready == rec.Ready {
		rec.LastTransitionTime = prev.LastTransitionTime
	}
	if _, err := kvstore.PutJSON(ctx, p.cfg.Buckets.Providers, key, rec); err != nil && !errors.Is(err, context.Canceled) {
		p.cfg.Log.Warn("record provider check", "target", ts.Name, "err", err)
		return
	}
	if !had || prev.Ready != rec.Ready {
		p.cfg.Log.Info("provider target", "target", ts.Name, "ready", rec.Ready, "reason", rec.Reason, "message", rec.Message)
		ev := events.Event{V: 1, ID: fmt.Sprintf("provider:%s:%d", key, now.UnixNano()), Kind: events.KindProvider, Proxy: p.cfg.Provider,
			At: now, Reason: events.Reason(rec.Reason), Message: rec.Message, Target: &rec}
		b, _ := json.Marshal(ev)
		if _, err := p.cfg.Buckets.JS.Publish(ctx, events.EventSubject(events.KindProvider, p.cfg.Provider), b, jetstream.WithMsgID(ev.ID)); err != nil {
			p.cfg.Log.Warn("publish provider event", "err", err)
		}
	}
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
