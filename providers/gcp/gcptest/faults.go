package gcptest

import (
	"fmt"
	"maps"
	"slices"
)

// Fault is an injected insert failure, consumed by the next insert into its zone.
type Fault int

const (
	// FaultQuota: the insert call itself answers 403 quotaExceeded (googleapi.Error).
	FaultQuota Fault = iota + 1
	// FaultQuotaAsync: the insert call succeeds; its operation turns DONE carrying
	// error.errors[{code: QUOTA_EXCEEDED}] and no httpErrorStatusCode, so the SDK's
	// Operation.Wait returns nil and only op.Proto().GetError() tells. No instance appears.
	FaultQuotaAsync
	// FaultStockout: the instance appears PROVISIONING, then vanishes, and its operation turns
	// DONE with ZONE_RESOURCE_POOL_EXHAUSTED and httpErrorStatusCode 503: Wait returns an
	// error with Code 503.
	FaultStockout
)

// FailInserts queues faults for the next inserts into zone, one per insert, in order.
func (s *Server) FailInserts(zone string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.insertFault[zone] = append(s.insertFault[zone], faults...)
}

// nextFault pops zone's next fault, 0 when none. Callers hold s.mu.
func (s *Server) nextFault(zone string) Fault {
	q := s.insertFault[zone]
	if len(q) == 0 {
		return 0
	}
	f := q[0] // before Delete, which shifts q in place
	s.insertFault[zone] = slices.Delete(q, 0, 1)
	return f
}

// SetUnreachable marks zone unreachable (or reachable again) for aggregatedList: its scope
// carries an UNREACHABLE warning instead of instances and, with returnPartialSuccess, is
// listed in unreachables. Calls naming the zone itself are still served.
func (s *Server) SetUnreachable(zone string, down bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	z, ok := s.zones[zone]
	if !ok {
		return fmt.Errorf("gcptest: unknown zone %q", zone)
	}
	z.unreachable = down
	return nil
}

// UnreachableShape is how aggregatedList reports an unreachable zone.
type UnreachableShape int

const (
	// UnreachableWarning: the zone's scope carries an UNREACHABLE warning instead of its
	// instances (and, with returnPartialSuccess, the zone is in unreachables). The default.
	UnreachableWarning UnreachableShape = iota
	// UnreachableOmitted: the zone's scope is left out of items and named only in the
	// answer's unreachables, under a PARTIAL_SUCCESS warning on the answer: the documented
	// partial-success shape. Whether the service answers so to a request without
	// returnPartialSuccess (the SDK's cannot set it) is not known, so a client must read both.
	UnreachableOmitted
)

// SetUnreachableShape chooses how aggregatedList reports the zones SetUnreachable marks.
func (s *Server) SetUnreachableShape(shape UnreachableShape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unreachableShape = shape
}

// RateLimit makes the next n API calls, whatever they are, answer 429 RESOURCE_EXHAUSTED
// with reason rateLimitExceeded.
func (s *Server) RateLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.burst429 = n
}

// InsertCalls is how many instances.insert calls reached the simulator, 429s included: what a
// test counts to prove the client did not retry.
func (s *Server) InsertCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.insertCalls
}

// Instances is how many instances exist in zone, visible or still being inserted.
func (s *Server) Instances(zone string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if z, ok := s.zones[zone]; ok {
		return len(z.instances)
	}
	return 0
}

// Inserted is how many instances inserts made: neither requestId replays, nor refused
// inserts (409, quota, 429), count. What a test counts to prove one instance per attempt.
func (s *Server) Inserted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inserted
}

// SetDelays changes the asynchronous steps of inserts and deletes that start from now on (a
// test holds an instance in PROVISIONING while it kills its client).
func (s *Server) SetDelays(d Delays) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Delays = d
}

func (s *Server) delays() Delays {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.Delays
}

// Statuses are the zone's instances by name, each with its status: visible ones as get
// answers them, and "PENDING" for those whose insert has not started.
func (s *Server) Statuses(zone string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	if z, ok := s.zones[zone]; ok {
		for name, inst := range z.instances {
			if inst.visible {
				out[name] = inst.pb.GetStatus()
			} else {
				out[name] = "PENDING"
			}
		}
	}
	return out
}

// Firewalls are the names of the firewall rules, sorted.
func (s *Server) Firewalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.firewalls))
}
