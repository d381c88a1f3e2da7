package prober

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
)

// handle runs one probe request: read the spec, probe, record, announce a transition. Every
// way out but a recorded verdict is a drop: the scheduler sends the next request anyway.
func (p *Prober) handle(ctx context.Context, subject string, data []byte) {
	req, err := decodeRequest(subject, data)
	if err != nil {
		p.log.Warn("dropping a malformed probe request", "subject", subject, "err", err)
		return
	}
	log := p.log.With("proxy", req.Proxy)
	if !p.claim(req.Proxy) {
		log.Debug("already probing this proxy; dropping the request")
		return
	}
	defer p.unclaim(req.Proxy)

	spec, ok := p.readSpec(ctx, log, req.Proxy)
	if !ok {
		return
	}
	check := spec.HealthCheck
	at := p.cfg.Now().UTC()
	if !req.At.IsZero() && at.Sub(req.At) > seconds(check.IntervalSeconds)+staleSlack {
		log.Debug("dropping a stale probe request", "requestedAt", req.At)
		return
	}
	target := p.defaultURL
	if check.URL != "" {
		if target, err = parseCheckURL(check.URL); err != nil {
			return // the spec validated it; a spec that did not would not have been read
		}
	}
	addr := net.JoinHostPort(req.Address, strconv.Itoa(req.Port))
	pctx, cancel := context.WithTimeout(ctx, seconds(check.TimeoutSeconds))
	res := p.probe(pctx, addr, target, spec.Auth)
	cancel()
	if ctx.Err() != nil {
		return // cut short by shutdown: says nothing about the proxy
	}
	p.cfg.Observer.ObserveProbe(res.err == nil, res.latency)
	h, transition, err := p.record(ctx, observation{proxy: req.Proxy, address: addr, checkURL: target.Redacted(),
		prober: p.cfg.Worker, at: at, check: check, res: res})
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("health not recorded", "err", err)
		}
		return
	}
	if res.err != nil {
		log.Debug("probe failed", "address", addr, "healthy", h.Healthy, "failures", h.ConsecutiveFailures, "err", res.err)
	} else {
		log.Debug("probe succeeded", "address", addr, "healthy", h.Healthy, "latency", res.latency.Round(time.Microsecond))
	}
	if !transition {
		return
	}
	if h.Healthy {
		log.Info("proxy healthy", "address", addr, "egressIp", h.EgressIP, "leakedHeaders", h.LeakedHeaders)
	} else {
		log.Info("proxy unhealthy", "address", addr, "err", h.LastError)
	}
	if err := p.publishTransition(ctx, h); err != nil {
		log.Warn("health event not published", "err", err)
	}
}

// decodeRequest parses a probe request and checks it against the subject it came on, so that
// a prober limited to some providers or hosts never probes another's proxy.
func decodeRequest(subject string, data []byte) (events.ProbeRequest, error) {
	var req events.ProbeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return req, fmt.Errorf("decode: %w", err)
	}
	switch {
	case req.V != 1:
		return req, fmt.Errorf("unsupported version %d", req.V)
	case schemas.ValidName(req.Proxy) != nil:
		return req, errors.New("proxy is not a valid name")
	case req.Address == "" || strings.ContainsAny(req.Address, " \t\r\n/@"):
		return req, errors.New("address is not a host")
	case req.Port < 1 || req.Port > 65535:
		return req, fmt.Errorf("port %d out of range", req.Port)
	case subject != events.ProbeSubject(req.Provider, req.Host, req.Proxy):
		return req, errors.New("provider, host or proxy differ from the subject")
	}
	return req, nil
}

// readSpec reads and parses the proxy's spec. A missing spec means the proxy is gone, an
// invalid one is never acted on: both drop the request.
func (p *Prober) readSpec(ctx context.Context, log *slog.Logger, proxy string) (schemas.ProxySpec, bool) {
	rctx, cancel := context.WithTimeout(ctx, kvBudget)
	defer cancel()
	raw, _, err := kvstore.Get(rctx, p.cfg.Store.Proxies, proxy)
	if errors.Is(err, kvstore.ErrNotFound) {
		log.Debug("proxy is gone; dropping the probe request")
		return schemas.ProxySpec{}, false
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("spec not readable; dropping the probe request", "err", err)
		}
		return schemas.ProxySpec{}, false
	}
	spec, err := schemas.ParseProxySpec(raw)
	if err != nil {
		log.Debug("spec is invalid; dropping the probe request", "err", err)
		return schemas.ProxySpec{}, false
	}
	return spec, true
}

// claim marks proxy as being probed here; false if it already is.
func (p *Prober) claim(proxy string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight[proxy] {
		return false
	}
	p.inFlight[proxy] = true
	return true
}

func (p *Prober) unclaim(proxy string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inFlight, proxy)
}

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }
