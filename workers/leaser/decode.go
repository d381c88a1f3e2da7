package leaser

import (
	"errors"
	"slices"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/schemas"
)

// Size limits on request strings: they end up in KV records, keys and events.
const (
	maxTargetLen   = 512
	maxStringLen   = 256 // holder, sticky, selector keys and values
	maxSelectorLen = 32
)

// decode reads a request strictly (schemas.DecodeStrict): an unknown, miscased, repeated or
// null field, trailing data or bad JSON is a 400 naming the field, so a typo never silently
// turns into a default.
func decode(data []byte, v any) error {
	err := schemas.DecodeStrict(data, v)
	if err == nil {
		return nil
	}
	var fe *schemas.FieldError
	if errors.As(err, &fe) {
		field := fe.Field
		if field == "" {
			field = `""` // a key that is the empty string
		}
		return badRequest(field, "%s: %s", field, fe.Problem)
	}
	return badRequest("(document)", "invalid request: %v", err)
}

// ttl turns a ttlSeconds field into a duration: 0 means def, anything else must be within
// [MinTTL, MaxTTL].
func (l *Leaser) ttl(seconds int, def time.Duration) (time.Duration, error) {
	if seconds == 0 {
		return def, nil
	}
	// Compared in seconds: a huge value must not overflow into range as a Duration.
	lo, hi := int(l.cfg.MinTTL/time.Second), int(l.cfg.MaxTTL/time.Second)
	if seconds < lo || seconds > hi {
		return 0, badRequest("ttlSeconds", "ttlSeconds must be between %d and %d, got %d", lo, hi, seconds)
	}
	return time.Duration(seconds) * time.Second, nil
}

func checkLen(field, s string, limit int) error {
	if len(s) > limit {
		return badRequest(field, "%s must be at most %d bytes, has %d", field, limit, len(s))
	}
	return nil
}

func (l *Leaser) decodeAcquire(data []byte) (events.AcquireRequest, time.Duration, error) {
	var r events.AcquireRequest
	if err := decode(data, &r); err != nil {
		return r, 0, err
	}
	ttl, err := l.ttl(r.TTLSeconds, l.cfg.DefaultTTL)
	if err != nil {
		return r, 0, err
	}
	if len(r.Selector) > maxSelectorLen {
		return r, 0, badRequest("selector", "selector must have at most %d entries, has %d", maxSelectorLen, len(r.Selector))
	}
	for k, v := range r.Selector {
		if k == "" || len(k) > maxStringLen || len(v) > maxStringLen {
			return r, 0, badRequest("selector", "selector keys must be 1 to %d bytes and values at most %d", maxStringLen, maxStringLen)
		}
	}
	switch r.MinAnonymity {
	case "", events.AnonymityAnonymous, events.AnonymityElite:
	default:
		return r, 0, badRequest("minAnonymity", "minAnonymity must be %q or %q (or absent for any), got %q",
			events.AnonymityAnonymous, events.AnonymityElite, truncate(string(r.MinAnonymity), 40))
	}
	for _, c := range []struct {
		field, v string
		limit    int
	}{{"target", r.Target, maxTargetLen}, {"holder", r.Holder, maxStringLen}, {"sticky", r.Sticky, maxStringLen}} {
		if err := checkLen(c.field, c.v, c.limit); err != nil {
			return r, 0, err
		}
	}
	if err := checkSession(r); err != nil {
		return r, 0, err
	}
	if err := checkTiers(r); err != nil {
		return r, 0, err
	}
	if err := checkRequestID(r.RequestID); err != nil {
		return r, 0, err
	}
	if err := l.checkWait(r.WaitSeconds); err != nil {
		return r, 0, err
	}
	switch {
	case r.PaceSeconds < 0 || r.PaceSeconds > int(MaxPace/time.Second):
		return r, 0, badRequest("paceSeconds", "paceSeconds must be between 0 and %d, got %d", int(MaxPace/time.Second), r.PaceSeconds)
	case r.PaceSeconds > 0 && r.Target == "":
		return r, 0, badRequest("paceSeconds", "paceSeconds paces the grants of a proxy for one site: it needs target")
	}
	return r, ttl, nil
}

// checkWait checks waitSeconds against the leaser's maximum (leases.maxWaitSeconds).
func (l *Leaser) checkWait(seconds int) error {
	limit := int(max(l.cfg.MaxWait, 0) / time.Second)
	switch {
	case seconds < 0:
		return badRequest("waitSeconds", "waitSeconds must be between 0 (answer at once) and %d, got %d", limit, seconds)
	case seconds > 0 && limit == 0:
		return badRequest("waitSeconds", "waitSeconds: this leaser does not hold acquires (leases.maxWaitSeconds is 0); leave it out or 0")
	case seconds > limit:
		return badRequest("waitSeconds", "waitSeconds must be at most %d (the leaser's leases.maxWaitSeconds), got %d", limit, seconds)
	}
	return nil
}

// checkSession checks strategy and the session fields of an acquire.
func checkSession(r events.AcquireRequest) error {
	if r.Strategy != "" && !slices.Contains(events.Strategies, r.Strategy) {
		return badRequest("strategy", "strategy must be one of %q (or absent for balanced), got %q",
			events.Strategies, truncate(string(r.Strategy), 40))
	}
	switch {
	case r.SessionSeconds < 0 || r.SessionSeconds > MaxSessionSeconds:
		return badRequest("sessionSeconds", "sessionSeconds must be between 1 and %d, got %d", MaxSessionSeconds, r.SessionSeconds)
	case r.SessionSeconds > 0 && r.Sticky == "":
		return badRequest("sessionSeconds", "sessionSeconds needs sticky: it is the lifetime of the sticky key's session")
	}
	switch r.StickyMode {
	case "", events.StickySoft:
	case events.StickyStrict:
		if r.SessionSeconds == 0 {
			return badRequest("stickyMode", "stickyMode strict needs sessionSeconds: a strict session is bound to its proxy for a lifetime")
		}
	default:
		return badRequest("stickyMode", "stickyMode must be %q or %q (or absent for soft), got %q",
			events.StickySoft, events.StickyStrict, truncate(string(r.StickyMode), 40))
	}
	if r.StickyMode != "" && r.Sticky == "" {
		return badRequest("stickyMode", "stickyMode needs sticky: it says what the sticky key's session does")
	}
	return nil
}

func parseID(s string) (leaseID, error) {
	if s == "" {
		return leaseID{}, badRequest("id", "id is required")
	}
	id, err := parseLeaseID(s)
	if err != nil {
		return leaseID{}, badRequest("id", "id %q: %v", truncate(s, 80), err)
	}
	return id, nil
}

// truncate keeps an echoed value short; IDs carry no secret, so echoing one is fine.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (l *Leaser) decodeRenew(data []byte) (events.RenewRequest, leaseID, error) {
	var r events.RenewRequest
	if err := decode(data, &r); err != nil {
		return r, leaseID{}, err
	}
	id, err := parseID(r.ID)
	if err != nil {
		return r, id, err
	}
	// The TTL itself is resolved once the lease is read: 0 keeps the lease's own.
	_, err = l.ttl(r.TTLSeconds, 0)
	return r, id, err
}

func decodeRelease(data []byte) (events.ReleaseRequest, leaseID, error) {
	var r events.ReleaseRequest
	if err := decode(data, &r); err != nil {
		return r, leaseID{}, err
	}
	id, err := parseID(r.ID)
	return r, id, err
}

func (l *Leaser) decodeReport(data []byte) (events.ReportRequest, leaseID, time.Duration, error) {
	var r events.ReportRequest
	if err := decode(data, &r); err != nil {
		return r, leaseID{}, 0, err
	}
	id, err := parseID(r.ID)
	if err != nil {
		return r, id, 0, err
	}
	var def time.Duration
	switch r.Result {
	case events.ReportOK:
	case events.ReportBlocked:
		if r.Target == "" {
			return r, id, 0, badRequest("target", "target is required when result is blocked (the site that blocked the proxy)")
		}
		def = l.cfg.BlockedCooldown
	case events.ReportFailed:
		def = l.cfg.FailedCooldown
	case "":
		return r, id, 0, badRequest("result", "result is required: ok, blocked or failed")
	default:
		return r, id, 0, badRequest("result", "result %q is unknown: use ok, blocked or failed", truncate(string(r.Result), 40))
	}
	if err := checkLen("target", r.Target, maxTargetLen); err != nil {
		return r, id, 0, err
	}
	cooldown := def
	switch {
	case r.CooldownSeconds < 0 || r.CooldownSeconds > int(l.cfg.MaxCooldown/time.Second):
		return r, id, 0, badRequest("cooldownSeconds", "cooldownSeconds must be between 1 and %d, got %d",
			int(l.cfg.MaxCooldown/time.Second), r.CooldownSeconds)
	case r.CooldownSeconds > 0 && r.Result == events.ReportOK:
		return r, id, 0, badRequest("cooldownSeconds", "cooldownSeconds applies to blocked and failed, not ok")
	case r.CooldownSeconds > 0:
		cooldown = time.Duration(r.CooldownSeconds) * time.Second
	}
	return r, id, cooldown, nil
}
