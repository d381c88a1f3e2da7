package leaser

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
)

// Idempotent acquires (docs/leases.md#retries, decision 85). An acquire with a requestId is
// answered, on every try and any replica, with at most one live lease. The mapping lives in
// lease_state as request.<hash of holder and request ID>, an events.LeaseRequest naming the
// lease, written after the grant with a Create (or, over a record whose lease has ended, a
// write at that record's revision): that compare-and-set is the one exact step, as the slot
// Create is for capacity. So:
//
//   - a retry that finds the record and its lease still held is answered with that lease
//     (renewed expiry and fresh credentials, the same ID) and grants nothing;
//   - a retry that arrives while the first try is still being granted grants too, but only
//     one of the two records its grant: the other gives its slot back and answers with the
//     winner's lease, so both callers see the same ID;
//   - a retry after the lease ended (released, expired, revoked, its proxy gone) is a new
//     acquire: the caller never got that lease or is done with it, and the record is
//     overwritten with the new grant;
//   - the record's TTL is the lease's first TTL: retries come within a client's retry
//     budget, long before, and a renewal need not touch it.
//
// Keyed by holder as well, so one crawler's request ID never answers another's acquire.

// requestKey is the lease_state key of holder's request id: a hash, so that its length
// and alphabet are the key's whatever the request ID holds.
func requestKey(holder, id string) string {
	h := sha256.New()
	h.Write([]byte(holder))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return "request." + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:18])
}

// checkRequestID accepts "" (no request ID) or 1 to MaxRequestIDLen bytes of printable
// ASCII without spaces: what clients generate (UUIDs, hex), and safe to echo.
func checkRequestID(id string) error {
	if len(id) > events.MaxRequestIDLen {
		return badRequest("requestId", "requestId must be at most %d bytes, has %d", events.MaxRequestIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return badRequest("requestId", "requestId must be printable ASCII without spaces (a UUID or random hex); byte %d is 0x%02x", i, id[i])
		}
	}
	return nil
}

// errRecordedElsewhere: the request's record names another try's lease, which could not be
// read to answer with it.
var errRecordedElsewhere = errors.New("the request is recorded with another lease")

// errRecordEnded: the request's record names a lease that ended, and the next write takes the
// record over at the revision read (recordRequest tries it at once, not after a back-off).
var errRecordEnded = errors.New("the request record names a lease that ended")

// idem is an acquire's request record, as far as this try knows it.
type idem struct {
	key string
	rev uint64 // of a record whose lease has ended: the grant overwrites it there; 0 creates
}

// priorGrant looks up r's request record: the lease it names if that lease is still held,
// else the idem a grant records itself with. Without a request ID both are nil.
func (l *Leaser) priorGrant(ctx context.Context, r events.AcquireRequest) (*events.LeaseReply, *idem, error) {
	if r.RequestID == "" {
		return nil, nil, nil
	}
	key := requestKey(r.Holder, r.RequestID)
	raw, rev, err := l.get(ctx, l.cfg.Buckets.LeaseState, key)
	switch {
	case errors.Is(err, kvstore.ErrNotFound):
		return l.unrecordedGrant(ctx, r, key)
	case err != nil:
		return nil, nil, fmt.Errorf("read request record: %w", err)
	}
	var rec events.LeaseRequest
	if json.Unmarshal(raw, &rec) != nil || rec.RequestID != r.RequestID || rec.Holder != r.Holder {
		return nil, &idem{key: key, rev: rev}, nil // unreadable (or another's): the grant overwrites it
	}
	g, held, err := l.heldGrant(ctx, rec)
	if err != nil || !held {
		return nil, &idem{key: key, rev: rev}, err
	}
	l.log.Info("acquire retried: answered with the lease of an earlier try", "id", g.ID, "holder", r.Holder)
	return &events.LeaseReply{Lease: g}, nil, nil
}

// grantFirstTry answers an acquire with a request ID that this replica's view knows no
// lease of, which is almost always a first try: it grants without reading the request
// record first, and records the grant with a Create. A retry whose earlier try did hold a
// lease (granted elsewhere, not heard of here yet) still gets that one: if its record is
// there, the Create conflicts and the grant is given back for the recorded lease
// (recordRequest), and if this try is refused (no slot free, a holder cap), the record is
// read then and its lease, if held, answers. The read moves off a grant's path, where it
// was a round trip of every acquire, to the refusal's.
func (l *Leaser) grantFirstTry(ctx context.Context, r events.AcquireRequest, ttl time.Duration) (any, error) {
	g, err := l.grantOnce(ctx, r, ttl, &idem{key: requestKey(r.Holder, r.RequestID)})
	if err == nil {
		return g, nil
	}
	prior, _, perr := l.priorGrant(ctx, r)
	if perr == nil && prior != nil {
		return *prior, nil
	}
	return nil, err
}

// heldGrant is the grant of the lease rec names, if that lease is still held.
func (l *Leaser) heldGrant(ctx context.Context, rec events.LeaseRequest) (events.LeaseGrant, bool, error) {
	id, err := parseLeaseID(rec.Lease)
	if err != nil {
		return events.LeaseGrant{}, false, nil
	}
	// Read, not taken from the view: the view may not have heard yet of a grant made
	// elsewhere, nor of its release.
	lease, rev, err := l.readLease(ctx, id)
	if _, ended := errors.AsType[*apiError](err); ended {
		return events.LeaseGrant{}, false, nil
	}
	if err != nil {
		return events.LeaseGrant{}, false, err
	}
	if l.view.staleLease(events.SlotKey(id.Proxy, id.Slot), rev, lease) != "" {
		return events.LeaseGrant{}, false, nil // its proxy was deleted or replaced
	}
	t, known, inRange := l.view.fleet.Endpoint(id.Proxy, id.Slot)
	if !known || !inRange {
		return events.LeaseGrant{}, false, nil
	}
	return l.grant(id.String(), lease, t), true, nil
}

// unrecordedGrant is the lease of r's request that this replica's view holds though no
// record names it: an earlier try granted it and never recorded it (its replica died in
// between, or it is still on the way). That lease answers, and is recorded now; without one
// the grant is r's own, recorded with a Create.
func (l *Leaser) unrecordedGrant(ctx context.Context, r events.AcquireRequest, key string) (*events.LeaseReply, *idem, error) {
	slotKey, ok := l.view.requestSlot(r.Holder, r.RequestID)
	if !ok {
		return nil, &idem{key: key}, nil
	}
	proxy, slot, _ := parseSlotKey(slotKey)
	s, held := l.view.fleet.Slot(proxy, slot)
	if !held {
		return nil, &idem{key: key}, nil
	}
	id := leaseID{Proxy: proxy, Slot: slot, Token: s.Lease.Token}
	g, held, err := l.adopt(ctx, id)
	if err != nil || !held {
		return nil, &idem{key: key}, err
	}
	reply := events.LeaseReply{Lease: g}
	prior, err := l.recordRequest(ctx, r, reply, &idem{key: key})
	if errors.Is(err, errRecordedElsewhere) {
		return nil, nil, err // the request's lease is another, unreadable now: a retry finds it
	}
	if err != nil {
		// Not recorded (or not known to be): a retry reads the record, or finds the lease
		// here again.
		l.log.Debug("record the request of an unrecorded grant", "id", id.String(), "err", err)
	}
	if prior != nil {
		// Another try recorded its own grant first, and it is held: that one is the
		// request's lease. The view's index named the newest grant of the request, which may
		// be a losing try's, being given back by it; answering it would hand out a lease
		// that is about to be deleted. Given back here too, in case its try is gone.
		l.releaseGrant(ctx, reply, "give back an unrecorded grant of a request recorded with another")
		return prior, nil, nil
	}
	l.log.Info("acquire retried: answered with the unrecorded lease of an earlier try", "id", id.String(), "holder", r.Holder)
	return &reply, nil, nil
}

// adopt makes the unrecorded lease id this request's answer: its slot is written again,
// marked adopted, at the revision read. The replica whose slot write seemed to fail gives
// such a grant back when its watch brings it (view.abandon), with a delete at the revision it
// saw: after the rewrite that delete fails, and before it the rewrite does. A watch that
// starts again (its stream elected a leader) may bring only the rewrite: marked adopted, it is
// not given back. So a lease is never both adopted and given back.
func (l *Leaser) adopt(ctx context.Context, id leaseID) (events.LeaseGrant, bool, error) {
	rec, rev, err := l.readLease(ctx, id)
	if _, ended := errors.AsType[*apiError](err); ended {
		return events.LeaseGrant{}, false, nil
	}
	if err != nil {
		return events.LeaseGrant{}, false, err
	}
	left := time.Until(rec.ExpiresAt)
	rec.Adopted = true
	t, known, inRange := l.view.fleet.Endpoint(id.Proxy, id.Slot)
	if left < time.Second || !known || !inRange {
		return events.LeaseGrant{}, false, nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return events.LeaseGrant{}, false, err
	}
	key := events.SlotKey(id.Proxy, id.Slot)
	nrev, err := kvstore.PutTTL(ctx, l.cfg.Buckets.JS, l.cfg.Buckets.Leases.Of(id.Proxy), key, b, rev, left.Truncate(time.Second))
	if errors.Is(err, kvstore.ErrConflict) {
		return events.LeaseGrant{}, false, nil // given back (or renewed) meanwhile
	}
	if err != nil {
		return events.LeaseGrant{}, false, fmt.Errorf("adopt %s: %w", key, err)
	}
	l.view.noteLease(key, nrev, rec)
	return l.grant(id.String(), rec, t), true, nil
}

// grantOnce grants r and records the grant under its request ID (ri; nil without one). Of
// two tries of one request that grant at once, the second to record gives its lease back
// and answers with the first's.
func (l *Leaser) grantOnce(ctx context.Context, r events.AcquireRequest, ttl time.Duration, ri *idem) (any, error) {
	g, err := l.acquireDecoded(ctx, r, ttl)
	if err != nil || ri == nil {
		return g, err
	}
	lr, ok := g.(events.LeaseReply)
	if !ok {
		return g, nil
	}
	prior, err := l.recordRequest(ctx, r, lr, ri)
	switch {
	case errors.Is(err, errShardStalled):
		// lease_state has no leader now (shards.go). Answered all the same: a retry, were
		// this reply lost, finds the lease by its request ID in the view (unrecordedGrant),
		// as it would after a 500, and an election no longer stops every acquire.
		l.log.Warn("an acquire's request record could not be written (lease_state stalled); the grant is answered unrecorded", "id", lr.Lease.ID, "err", err)
		return g, nil
	case errors.Is(err, errRecordedElsewhere):
		// The request's record names another try's lease: this one is given back, and the
		// caller, told to retry, gets that lease once it can be read.
		l.releaseGrant(ctx, lr, "give back the lease of a retried acquire whose earlier try's lease cannot be read now")
		return nil, err
	case err != nil:
		// Not given back: the record may have landed all the same, and name it. The caller,
		// told to retry, gets it back from the record or, unrecorded, from the view's request
		// index (unrecordedGrant); a caller that never retries leaves it to its TTL.
		l.log.Warn("record an acquire's request; its lease stays for a retry to find", "id", lr.Lease.ID, "err", err)
		return nil, err
	case prior != nil:
		l.releaseGrant(ctx, lr, "give back the lease of a retried acquire whose earlier try won")
		return *prior, nil
	}
	return g, nil
}

// recordRequest writes r's request record naming the lease of lr, or returns the lease of
// another try of r that recorded its own first and is still held. A write that failed on
// the way (a timeout, a stream between leaders) may yet have landed, so it is tried again
// until the answer is definite, within a budget of its own: the request's may be what ran
// out. Written again, a record that had landed answers with a conflict, and the read back
// names this lease.
func (l *Leaser) recordRequest(ctx context.Context, r events.AcquireRequest, lr events.LeaseReply, ri *idem) (*events.LeaseReply, error) {
	b, err := json.Marshal(events.LeaseRequest{V: 1, Holder: r.Holder, RequestID: r.RequestID, Lease: lr.Lease.ID, At: l.now()})
	if err != nil {
		return nil, err
	}
	// With lease shards, lease_state's health is tracked as theirs is: a record write that
	// a stream election would hold up has the shard budget, and none is tried while it is
	// stalled (errShardStalled: grantOnce answers unrecorded).
	budget := l.cfg.RequestBudget
	if l.shards.tracked() {
		if l.shards.stateStalled() {
			return nil, fmt.Errorf("record request %s: %w", ri.key, errShardStalled)
		}
		budget = l.shards.budget
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	defer cancel()
	for wait := 25 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		prior, done, err := l.writeRequest(rctx, r, lr, ri, b)
		if done {
			return prior, err
		}
		if errors.Is(err, errRecordEnded) && rctx.Err() == nil {
			// Nothing failed: the write to come is at a revision just read. Another try
			// taking the record first makes it conflict and read again, within the budget.
			continue
		}
		select {
		case <-rctx.Done():
			err = fmt.Errorf("record request %s: %w", ri.key, err)
			if l.shards.tracked() && ctx.Err() == nil {
				l.shards.markStateStalled()
				err = fmt.Errorf("%w: %w", errShardStalled, err)
			}
			return nil, err
		case <-time.After(wait):
		}
	}
}

// writeRequest tries recordRequest's write once: done with the answer, or not with why.
func (l *Leaser) writeRequest(ctx context.Context, r events.AcquireRequest, lr events.LeaseReply, ri *idem, b []byte) (*events.LeaseReply, bool, error) {
	recTTL := max(time.Duration(lr.Lease.TTLSeconds)*time.Second, time.Second)
	_, err := kvstore.WriteTTL(ctx, l.cfg.Buckets.JS, l.cfg.Buckets.LeaseState, ri.key, b, ri.rev, recTTL)
	if !errors.Is(err, kvstore.ErrConflict) {
		return nil, err == nil, err
	}
	// Recorded meanwhile: by this very write (it landed though its answer was lost), or by
	// another try of the request, whose lease answers if it is still held.
	raw, rev, err := l.get(ctx, l.cfg.Buckets.LeaseState, ri.key)
	if errors.Is(err, kvstore.ErrNotFound) {
		*ri = idem{key: ri.key}
		return nil, false, err
	}
	if err != nil {
		return nil, false, err
	}
	var rec events.LeaseRequest
	if json.Unmarshal(raw, &rec) != nil || rec.RequestID != r.RequestID || rec.Holder != r.Holder {
		*ri = idem{key: ri.key, rev: rev}
		return nil, false, errors.New("the request record is unreadable")
	}
	if rec.Lease == lr.Lease.ID {
		return nil, true, nil
	}
	g, held, err := l.heldGrant(ctx, rec)
	switch {
	case err != nil:
		// The record is there and names another lease, whose state cannot be read now (its
		// shard may be stalled): definite for this grant, which is not the request's lease,
		// and no sign that lease_state is stalled.
		return nil, true, fmt.Errorf("%w: %s: %w", errRecordedElsewhere, rec.Lease, err)
	case held:
		return &events.LeaseReply{Lease: g}, true, nil
	}
	*ri = idem{key: ri.key, rev: rev} // its lease ended: this grant takes the record over
	return nil, false, errRecordEnded
}

// reqRef is a request ID of a holder.
type reqRef struct{ holder, id string }

// indexRequest records that slot key holds l, with its request ID, or nothing (a zero l).
// Callers hold mu.
func (v *view) indexRequest(key string, l events.Lease) {
	if old, ok := v.slotReq[key]; ok {
		if v.reqSlot[old] == key {
			delete(v.reqSlot, old)
		}
		delete(v.slotReq, key)
	}
	if l.RequestID != "" {
		ref := reqRef{holder: l.Holder, id: l.RequestID}
		v.reqSlot[ref] = key
		v.slotReq[key] = ref
	}
}

// knowsRequest reports whether the view holds a lease of holder's request ID id.
func (v *view) knowsRequest(holder, id string) bool {
	_, ok := v.requestSlot(holder, id)
	return ok
}

// requestSlot is the slot key whose lease has holder's request ID id, if the view knows one.
func (v *view) requestSlot(holder, id string) (string, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	key, ok := v.reqSlot[reqRef{holder: holder, id: id}]
	return key, ok
}

// releaseGrant deletes the slot of a grant nobody will hold; if that fails the slot frees
// itself at its TTL.
func (l *Leaser) releaseGrant(ctx context.Context, lr events.LeaseReply, what string) {
	// Not with the request's context alone: its deadline may be what just failed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.RequestBudget)
	defer cancel()
	id, err := parseLeaseID(lr.Lease.ID)
	if err == nil {
		_, _, err = l.deleteLease(ctx, id)
	}
	if err != nil {
		l.log.Warn(what+"; it ends at its TTL", "id", lr.Lease.ID, "err", err)
	}
}

// orNil is p's reply, or an untyped nil: a typed nil pointer in an any is not nil.
func orNil(p *events.LeaseReply) any {
	if p == nil {
		return nil
	}
	return *p
}
