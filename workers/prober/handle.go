package prober

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go"
)

// job is one probe, with everything it needs copied out of the loop's state.
type job struct {
	proxy    string
	addr     string // host:port
	check    schemas.HealthCheck
	target   *url.URL
	auth     *schemas.Auth
	expected string              // expectedEgress, "" when unknown
	prev     *events.ProxyHealth // the record the loop knows, nil for none
	rev      uint64              // its revision
	known    bool                // prev and rev are known; otherwise record reads them
}

// completion is a worker's report of a job: the record written, if any.
type completion struct {
	proxy  string
	health *events.ProxyHealth
	rev    uint64
}

func (p *Prober) newJob(t *target) job {
	j := job{proxy: t.name, addr: t.addr, check: t.spec.check, target: p.defaultURL,
		auth:     p.probeAuth(t.name, t.generation(), t.instanceAuth(), seconds(t.spec.check.TimeoutSeconds)),
		expected: expectedEgress(t), rev: t.rev, known: true}
	if h := t.current(); h != nil {
		// A record about another address, or from before this one appeared, describes a
		// predecessor: the fold starts afresh (at the record's revision, for the write).
		c := *h
		j.prev = &c
	}
	if t.spec.check.URL != "" {
		// The spec validated it; should it not parse now, the probe reports that.
		j.target, _ = parseCheckURL(t.spec.check.URL)
	}
	return j
}

// execute runs one probe, records the verdict and announces a transition.
func (p *Prober) execute(ctx context.Context, j job) completion {
	c := completion{proxy: j.proxy}
	log := p.log.With("proxy", j.proxy)
	at := p.cfg.Now().UTC()
	var res result
	pctx, cancel := context.WithTimeout(ctx, seconds(j.check.TimeoutSeconds))
	if j.target == nil {
		// The CONNECT path has nowhere to go; the forward path still judges what sites see.
		res = result{pathResult: pathResult{err: errors.New("check URL does not parse")}}
		if p.forwardURL != nil {
			f := p.forwardFetch(pctx, j.addr, p.forwardURL, j.auth)
			res.forward = &f
		}
	} else {
		res = p.probe(pctx, j.addr, j.target, p.forwardURL, j.auth)
	}
	cancel()
	if ctx.Err() != nil {
		return c // cut short by shutdown: says nothing about the proxy
	}
	p.cfg.Observer.ObserveProbe(res.err == nil, res.latency)
	if res.failed() && !p.sentinel.pathUp(ctx) {
		// The echo endpoint does not answer the prober itself: the failure says nothing of
		// the proxy, and recording it would judge the fleet for the probe path's fault.
		log.Debug("probe failed while the probe path is down; not recorded", "address", j.addr, "err", res.firstErr())
		return c
	}
	checkURL := ""
	if j.target != nil {
		checkURL = j.target.Redacted()
	}
	h, rev, ch, err := p.record(ctx, j, observation{proxy: j.proxy, address: j.addr, checkURL: checkURL,
		prober: p.cfg.Worker, at: at, check: j.check, expected: j.expected, res: res})
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("health not recorded", "err", err)
		}
		return c
	}
	c.health, c.rev = &h, rev
	if res.err != nil {
		log.Debug("probe failed", "address", j.addr, "healthy", h.Healthy, "failures", h.ConsecutiveFailures, "err", res.err)
	} else {
		log.Debug("probe succeeded", "address", j.addr, "healthy", h.Healthy, "latency", res.latency.Round(time.Microsecond))
	}
	if ch.anonymity {
		log.Info("proxy anonymity changed", "address", j.addr, "anonymity", h.Anonymity, "was", ch.was, "leakedHeaders", h.LeakedHeaders)
		if err := p.publishAnonymityChange(ctx, ch.was, h); err != nil {
			log.Warn("anonymity event not published", "err", err)
		}
	}
	if !ch.health {
		return c
	}
	if h.Healthy {
		log.Info("proxy healthy", "address", j.addr, "egressIp", h.EgressIP, "leakedHeaders", h.LeakedHeaders)
	} else {
		log.Info("proxy unhealthy", "address", j.addr, "err", h.LastError)
	}
	if err := p.publishTransition(ctx, h); err != nil {
		log.Warn("health event not published", "err", err)
	}
	return c
}

// receive is the probe-now subscription's handler: it checks the request and leaves the
// proxy's name for the loop, which probes it with what it knows (spec and current address).
func (n *nudges) receive(p *Prober) nats.MsgHandler {
	return func(m *nats.Msg) {
		req, err := decodeRequest(m.Subject, m.Data)
		if err != nil {
			p.log.Warn("dropping a malformed probe request", "subject", m.Subject, "err", err)
			return
		}
		n.add(req.Proxy)
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

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }
