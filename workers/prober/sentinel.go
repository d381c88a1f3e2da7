package prober

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"golang.org/x/sync/singleflight"
)

// The sentinel tells a broken fleet from a broken probe path. Every probe ends at the echo
// endpoint (the CONNECT path by default, the plain-HTTP path always), so when the echo
// endpoint cannot be reached from the prober itself, every probe fails whatever the proxies
// do. A prober whose sentinel says so records no failed probe: it would turn the whole fleet
// Unhealthy and have its instances replaced for a fault that is not theirs. It keeps probing,
// records what succeeds, says so (a ProbePathDown event, its presence record, a log line) and
// resumes judging as soon as the echo endpoint answers again (ProbePathRestored).

// Sentinel timings: how long a direct check may take, how long its answer stands for the
// failed probes that ask, and how often it is checked while down (to say when it is back).
const (
	sentinelTimeout = 2 * time.Second
	sentinelFresh   = time.Second
	sentinelRetry   = 2 * time.Second
)

// sentinel checks the prober's echo endpoint directly, without a proxy.
type sentinel struct {
	target *url.URL // nil: no echo endpoint to check (an https default), always up
	client *http.Client
	flight singleflight.Group
	// onChange is called, outside mu, when the verdict flips; err says why it is down.
	onChange func(ctx context.Context, up bool, err error)

	mu      sync.Mutex
	up      bool
	checked time.Time // when up was last established; zero before the first check
}

func newSentinel(target *url.URL, onChange func(context.Context, bool, error)) *sentinel {
	// No proxy, no keep-alive: each check is a fresh connection, as a probe's is.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	return &sentinel{target: target, client: &http.Client{Transport: tr, Timeout: sentinelTimeout}, onChange: onChange, up: true}
}

// pathUp reports whether the echo endpoint answers directly: from a check less than
// sentinelFresh old, or from a new one that concurrent callers share.
func (s *sentinel) pathUp(ctx context.Context) bool {
	if s.target == nil {
		return true
	}
	s.mu.Lock()
	up, fresh := s.up, !s.checked.IsZero() && time.Since(s.checked) < sentinelFresh
	s.mu.Unlock()
	if fresh {
		return up
	}
	v, _, _ := s.flight.Do("check", func() (any, error) { return s.check(ctx), nil })
	return v.(bool)
}

// check fetches the echo endpoint once and records the verdict.
func (s *sentinel) check(ctx context.Context) bool {
	err := s.fetch(ctx)
	if ctx.Err() != nil {
		return true // cut short by shutdown: says nothing about the path
	}
	up := err == nil
	s.mu.Lock()
	changed := up != s.up
	s.up, s.checked = up, time.Now()
	s.mu.Unlock()
	if changed && s.onChange != nil {
		s.onChange(ctx, up, err)
	}
	return up
}

func (s *sentinel) fetch(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, sentinelTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, s.target.String(), nil)
	if err != nil {
		return err
	}
	res, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is the prober's own, said elsewhere
		}
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("the echo endpoint answered %s", res.Status)
	}
	return nil
}

// watch checks the path every sentinelRetry while it is down, so that its return is seen
// without waiting for a probe to fail, until ctx ends.
func (s *sentinel) watch(ctx context.Context) {
	if s.target == nil {
		return
	}
	t := time.NewTicker(sentinelRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.mu.Lock()
			down := !s.up
			s.mu.Unlock()
			if down {
				s.check(ctx)
			}
		}
	}
}

// isUp is the last verdict, for the presence record.
func (s *sentinel) isUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// failed reports whether either path of the probe failed.
func (r result) failed() bool { return r.err != nil || (r.forward != nil && r.forward.err != nil) }

// firstErr is the error of the CONNECT path, else of the plain-HTTP one.
func (r result) firstErr() error {
	if r.err == nil && r.forward != nil {
		return r.forward.err
	}
	return r.err
}

// probePathChanged says that the probe path went down or came back: a log line and a prober
// event (the presence record follows at the next renewal).
func (p *Prober) probePathChanged(ctx context.Context, up bool, err error) {
	reason, msg := events.ReasonProbePathRestored, "the echo endpoint answers the prober again: probes are judged again"
	if !up {
		reason = events.ReasonProbePathDown
		msg = fmt.Sprintf("the echo endpoint %s does not answer the prober itself (%v): no failed probe is recorded until it does", p.forwardURL.Redacted(), err)
		p.log.Warn("probe path down: failed probes are not recorded", "echo", p.forwardURL.Redacted(), "err", err)
	} else {
		p.log.Info("probe path restored: probes are judged again", "echo", p.forwardURL.Redacted())
	}
	ev := events.Event{V: 1, ID: newID(), Kind: events.KindProber, Proxy: p.member.ID, At: p.cfg.Now().UTC(),
		Reason: reason, Message: msg, Prober: &events.ProberLag{Worker: p.cfg.Worker, Concurrency: p.cfg.Concurrency}}
	p.publishProberEvent(ctx, ev)
}
