package events

import "time"

// Lease service (DESIGN §3.5): a micro service named LeaseService with these endpoints.
const (
	LeaseService        = "egress-leases"
	LeaseSubjectPrefix  = "egress.lease"
	LeaseAcquireSubject = "egress.lease.acquire"
	LeaseRenewSubject   = "egress.lease.renew"
	LeaseReleaseSubject = "egress.lease.release"
	LeaseReportSubject  = "egress.lease.report"
)

// Lease is the value of a slot key <proxy>.<slot> in proxy_leases. The key's TTL is the
// lease's; the server expires it. Token is random per grant and kept by renewals, so the lease
// ID <proxy>.<slot>.<token> stays the same for the lease's whole life while a later grant of
// the same slot gets another one.
type Lease struct {
	V          int       `json:"v"`
	Proxy      string    `json:"proxy"`
	Slot       int       `json:"slot"`
	Token      string    `json:"token"`
	TTLSeconds int       `json:"ttlSeconds"` // of the last grant or renewal; a renewal without one keeps it
	Holder     string    `json:"holder,omitempty"`
	Target     string    `json:"target,omitempty"`
	Sticky     string    `json:"sticky,omitempty"`
	AcquiredAt time.Time `json:"acquiredAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// What the lease was granted against, so that any leaser can tell, from its own view,
	// that the proxy has since been deleted or replaced (and remove the slot) without
	// mistaking a view that lags behind the grant for one: the revisions of the spec and
	// the status the granting leaser had read, and the instance (ProxyStatus.Incarnation).
	SpecRevision   uint64 `json:"specRevision,omitempty"`
	StatusRevision uint64 `json:"statusRevision,omitempty"`
	Instance       string `json:"instance,omitempty"`
	// Hold is the lease's holder slot when its holder is capped (docs/leases.md#per-holder-caps):
	// renewed and released with the lease.
	Hold *LeaseHold `json:"hold,omitempty"`
	// RequestID is the acquire's request ID, if it had one: a retry finds the lease by it.
	RequestID string `json:"requestId,omitempty"`
	// Adopted marks a grant whose first answer was lost and which a retry of its acquire took
	// over (docs/leases.md#retries): the replica that gave up on its slot write must not
	// give it back, whichever revision of it its watch brings first.
	Adopted bool `json:"adopted,omitempty"`
	// Tier is the tier the lease was granted on, for an acquire with tiers.
	Tier *LeaseTier `json:"tier,omitempty"`
}

// SlotEnd is the body of the delete marker a leaser writes when it removes the slot of an
// ended lease: every leaser's watch delivers it, so whichever answers the holder's next
// renewal can say why the lease is gone.
type SlotEnd struct {
	V     int    `json:"v"`
	Token string `json:"token"`
	End   Reason `json:"end"` // ReasonProxyDeleted or ReasonProxyReplaced
}

// Cooldown is the value of <proxy> (global) or <proxy>.<b64url(target)> in proxy_cooldowns.
type Cooldown struct {
	V      int          `json:"v"`
	Proxy  string       `json:"proxy"`
	Target string       `json:"target,omitempty"` // empty: every target
	Result ReportResult `json:"result"`           // blocked or failed
	Holder string       `json:"holder,omitempty"`
	Until  time.Time    `json:"until"`
	// Strikes is, for a blocked cooldown with escalation on, how many blocks in a row on the
	// target this one is (1: the first); its length grew with it (docs/leases.md).
	Strikes int `json:"strikes,omitempty"`
	// Because and Neighbourhood are, for a neighbour's cooldown (CooldownNeighbour), the
	// proxy whose block caused it and the neighbourhood they share (a prefix, or
	// target:<provider>/<target>).
	Because       string `json:"because,omitempty"`
	Neighbourhood string `json:"neighbourhood,omitempty"`
}

// Strikes is the record of a (proxy, target)'s blocks in a row, in proxy_cooldowns under
// the cooldown's key plus ".strikes", with a TTL of the strike memory after the last block:
// it outlives the cooldowns it escalates. A success on the target takes one off.
type Strikes struct {
	V      int       `json:"v"`
	Proxy  string    `json:"proxy"`
	Target string    `json:"target"`
	Count  int       `json:"count"`
	LastAt time.Time `json:"lastAt"`
}

// AcquireRequest asks for a lease on a Ready proxy matching Selector.
type AcquireRequest struct {
	Selector   map[string]string `json:"selector,omitempty"`
	Target     string            `json:"target,omitempty"`
	TTLSeconds int               `json:"ttlSeconds,omitempty"`
	Holder     string            `json:"holder,omitempty"`
	Sticky     string            `json:"sticky,omitempty"`
	// MinAnonymity leaves out proxies the probers judged less anonymous (or not at all):
	// "anonymous" or "elite"; "" takes any.
	MinAnonymity Anonymity `json:"minAnonymity,omitempty"`
	// Strategy orders the eligible proxies; "" is balanced.
	Strategy Strategy `json:"strategy,omitempty"`
	// SessionSeconds binds Sticky to the granted proxy for that long, across leases and
	// replicas, even after release; 0 keeps the plain preference for the key's last proxy.
	SessionSeconds int `json:"sessionSeconds,omitempty"`
	// StickyMode is what a session does when its proxy is unavailable; "" is soft.
	StickyMode StickyMode `json:"stickyMode,omitempty"`
	// WaitSeconds holds the request, when nothing matching is free, until a matching proxy
	// frees a slot or becomes Ready, first come first served, for at most this long (bounded
	// by the leaser's leases.maxWaitSeconds); 0 answers at once, as without it. The caller's
	// own timeout, sent as ReplyTimeoutHeader, shortens the wait so the answer comes in time.
	WaitSeconds int `json:"waitSeconds,omitempty"`
	// PaceSeconds is the least time between two grants of one proxy for Target (pacing, so
	// a site does not see one address come back at once); it needs Target. 0: the leaser's
	// leases.paceSeconds (none by default).
	PaceSeconds int `json:"paceSeconds,omitempty"`
	// RequestID makes the acquire idempotent (docs/leases.md#retries): a retry with the same
	// holder and request ID, on any replica, gets the lease the first try was granted while
	// that lease lives, never a second one. Generated by the client per acquire, at most
	// MaxRequestIDLen bytes of printable ASCII; "" acquires without.
	RequestID string `json:"requestId,omitempty"`
	// Tiers are ordered selectors, cheapest first (docs/leases.md#tiers): each is added to
	// Selector, and the leaser grants on the tier its target is at, moving the target up after
	// blocks and back down after a quiet period. It needs Target; at most MaxTiers.
	Tiers []map[string]string `json:"tiers,omitempty"`
}

// IdempotencyKeyHeader is the HTTP face's other way to send an acquire's requestId (the
// header of the IETF httpapi draft): the body's field wins when both are there and agree, and
// a request whose two differ is refused.
const IdempotencyKeyHeader = "Idempotency-Key"

// MaxRequestIDLen bounds AcquireRequest.RequestID: a UUID or 32 random hex digits fit.
const MaxRequestIDLen = 128

// LeaseRequest is the value of request.<hash> in lease_state: the lease an acquire with a
// request ID was granted, so that a retry of it is answered with that lease. hash is of the
// holder and the request ID; the record's TTL is its lease's.
type LeaseRequest struct {
	V         int       `json:"v"`
	Holder    string    `json:"holder,omitempty"`
	RequestID string    `json:"requestId"`
	Lease     string    `json:"lease"` // the lease ID
	At        time.Time `json:"at"`
}

// ReplyTimeoutHeader carries, on an acquire request, how long the caller waits for the reply,
// in milliseconds: a waiting acquire is answered (503) before then, and a grant that could
// only be made after it is released rather than sent to nobody.
const ReplyTimeoutHeader = "Egress-Reply-Timeout-Ms"

// LeaseGrant is a granted (or renewed) lease. URL is http://[user:pass@]host:port, ready
// for curl -x. TTLSeconds is the TTL the service applied, so a client can schedule renewals
// without comparing its clock with ExpiresAt.
//
// Username and Password are the URL's credentials as fields, for clients that take them apart
// (Playwright's proxy option, Puppeteer's page.authenticate); absent on a proxy without auth.
// Like the URL, they are secrets: never log them. Egress says where the proxy's traffic
// leaves from, so that a crawler can match its locale and timezone to it.
type LeaseGrant struct {
	ID         string       `json:"id"`
	Proxy      string       `json:"proxy"`
	Host       string       `json:"host"`
	Port       int          `json:"port"`
	URL        string       `json:"url"`
	Username   string       `json:"username,omitempty"`
	Password   string       `json:"password,omitempty"`
	ExpiresAt  time.Time    `json:"expiresAt"`
	TTLSeconds int          `json:"ttlSeconds"`
	Egress     *LeaseEgress `json:"egress,omitempty"`
	// Tier is, for an acquire with tiers, the tier granted and why.
	Tier *TierChoice `json:"tier,omitempty"`
}

// LeaseEgress is where a leased proxy's traffic leaves from, as the fleet knows it at the grant.
type LeaseEgress struct {
	// Address is the source address sites saw at the proxy's last probe (the prober's echo
	// endpoint recorded it); before its first probe, the address the proxy's traffic is
	// expected to leave from, when that is known (ProxyStatus.ExpectedEgress); else empty.
	Address string `json:"address,omitempty"`
	// Observed is true when Address is what a probe saw, false when it is only expected.
	Observed bool `json:"observed,omitempty"`
	// Provider and Target are the provider and its target (host, project, node) the instance
	// runs on; "external" for an external endpoint.
	Provider string `json:"provider,omitempty"`
	Target   string `json:"target,omitempty"`
	// Region and Zone are the spec's placement, as the provider reads them.
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
	Pool   string `json:"pool,omitempty"`
	// Attributes are the proxy's selector attributes (geo, tier, ...).
	Attributes map[string]string `json:"attributes,omitempty"`
}

// LeaseReply answers acquire and renew.
type LeaseReply struct {
	Lease LeaseGrant `json:"lease"`
}

// RenewRequest extends a lease.
type RenewRequest struct {
	ID         string `json:"id"`
	TTLSeconds int    `json:"ttlSeconds,omitempty"`
}

// ReleaseRequest ends a lease; releasing twice is fine.
type ReleaseRequest struct {
	ID string `json:"id"`
}

// ReleaseReply answers release.
type ReleaseReply struct {
	Released bool `json:"released"`
	// Reason says, when Released is false, why nothing was released: the lease had already
	// ended (expired, released), never existed, or is another crawler's.
	Reason string `json:"reason,omitempty"`
}

// ReportResult is how a leased proxy did, as a crawler reports it.
type ReportResult string

// CooldownPaced is the result of a cooldown the lease service wrote itself at a grant that
// asked for pacing (AcquireRequest.PaceSeconds): no report sets it.
const CooldownPaced ReportResult = "paced"

// CooldownNeighbour is the result of a cooldown the lease service wrote for a neighbour of a
// proxy reported blocked (neighbour-aware cooldowns): no report sets it.
const CooldownNeighbour ReportResult = "neighbour"

// Report results.
const (
	ReportOK      ReportResult = "ok"
	ReportBlocked ReportResult = "blocked"
	ReportFailed  ReportResult = "failed"
)

// ReportRequest tells how a leased proxy did: blocked cools it down for Target, failed for
// every target (and asks for a probe now).
type ReportRequest struct {
	ID              string       `json:"id"`
	Result          ReportResult `json:"result"`
	Target          string       `json:"target,omitempty"`
	CooldownSeconds int          `json:"cooldownSeconds,omitempty"`
	Release         bool         `json:"release,omitempty"`
}

// ReportReply answers report.
type ReportReply struct {
	CooldownUntil time.Time `json:"cooldownUntil,omitzero"`
	// Strikes is, when blocks escalate, how many blocks in a row on the target this one is.
	Strikes int `json:"strikes,omitempty"`
	// NeighboursCooled is, with neighbour-aware cooldowns, how many of the proxy's neighbours
	// this block cooled down for the target too.
	NeighboursCooled int `json:"neighboursCooled,omitempty"`
	// Tier is, for a lease granted in tiers, the tier (1 is the first) its target is at after
	// this report; TierMoved is true when this report moved it up.
	Tier      int  `json:"tier,omitempty"`
	TierMoved bool `json:"tierMoved,omitempty"`
	Released  bool `json:"released,omitempty"`
}

// ErrorCode is a lease service error code, in the Nats-Service-Error-Code header and in
// ErrorReply.
type ErrorCode int

// Lease service error codes.
const (
	CodeBadRequest  ErrorCode = 400
	CodeNotFound    ErrorCode = 404 // unknown lease
	CodeConflict    ErrorCode = 409 // the lease expired and its slot belongs to someone else now
	CodeGone        ErrorCode = 410 // the service ended the lease; ErrorDetail.End says why
	CodeTooMany     ErrorCode = 429 // the holder is at its limit (ErrorHolderAtCap)
	CodeUnavailable ErrorCode = 503 // no proxy available; Availability says why
	CodeInternal    ErrorCode = 500

	// Only the HTTP face of the service (docs/leases.md) answers these; its status is the code.
	CodeUnauthorized     ErrorCode = 401 // no bearer token, or one the leaser does not know
	CodeMethodNotAllowed ErrorCode = 405 // every endpoint takes POST only
	CodeTooLarge         ErrorCode = 413 // the body is over the face's limit
)

// ErrorReply is the body of every lease service error.
type ErrorReply struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail names the problem; Field names the request field at fault, if one is.
type ErrorDetail struct {
	Code         ErrorCode     `json:"code"`
	Message      string        `json:"message"`
	Field        string        `json:"field,omitempty"`
	Availability *Availability `json:"availability,omitempty"`
	End          Reason        `json:"end,omitempty"` // with CodeGone: ReasonProxyDeleted or ReasonProxyReplaced
	// Reason refines the code (ErrorHolderAtCap, ErrorSessionUnavailable).
	Reason ErrorReason `json:"reason,omitempty"`
	// Limit is the holder's limit of concurrent leases, with ErrorHolderAtCap.
	Limit   int            `json:"limit,omitempty"`
	Session *SessionDetail `json:"session,omitempty"` // with ErrorSessionUnavailable
	// Wait tells a waiting acquire that found nothing before its deadline how long it waited,
	// its place in the queue at the end, and why it stopped.
	Wait *WaitDetail `json:"wait,omitempty"`
	// Shards says, with ErrorShardUnavailable, which lease shards were stalled and what the
	// request passed over for them.
	Shards *ShardDetail `json:"shards,omitempty"`
	// Retry says that the failure was on the service's side (an internal error, a replica
	// that stopped): the same request sent again shortly may succeed, and clients retry it
	// with backoff within their budget. An acquire is safe to send again only with a
	// requestId.
	Retry bool `json:"retry,omitempty"`
}

// ShardDetail is what a request answered ShardUnavailable learns of the lease shards.
type ShardDetail struct {
	// Stalled are the shards (0 is proxy_leases, i is proxy_leases_<i>) the request needed and
	// found without a stream leader, or marked so by a write that failed moments before.
	Stalled []int `json:"stalled"`
	// Skipped is how many of an acquire's candidates lay in them and were not tried (0 for
	// a renew or release).
	Skipped int `json:"skipped"`
	Shards  int `json:"shards"` // how many lease shards there are
	// RetryAfterMs is how often the service looks whether a stalled shard has a leader again:
	// a retry sooner than that finds it as it was.
	RetryAfterMs int `json:"retryAfterMs"`
}

// WaitDetail is what an acquire that waited in vain learns of its wait.
type WaitDetail struct {
	WaitedSeconds float64 `json:"waitedSeconds"`
	// Position is the acquire's place among the live waiters whose selectors overlap its
	// own when it stopped: 1 was next.
	Position int `json:"position"`
	// Waiting is how many acquires waited across the leaser replicas when it stopped.
	Waiting int        `json:"waiting"`
	Cause   WaitCause  `json:"cause"`
	Until   *time.Time `json:"until,omitempty"` // the deadline it had
}

// WaitCause says why a waiting acquire stopped waiting without a lease.
type WaitCause string

// Wait causes.
const (
	WaitTimedOut WaitCause = "timed-out" // its waitSeconds (or the caller's timeout) ran out
	WaitStopped  WaitCause = "stopped"   // the leaser replica holding it stopped: retry
)

// Waiter is the value of wait.<id> in lease_state: one acquire waiting for a slot. Its KV
// revision orders it among all waiters of every replica (first come, first served); its TTL
// outlasts its deadline a little, so a crashed replica's waiters expire by themselves.
type Waiter struct {
	V        int               `json:"v"`
	Replica  string            `json:"replica"` // the waiting.<replica> heartbeat that says it is alive
	Worker   string            `json:"worker,omitempty"`
	Holder   string            `json:"holder,omitempty"`
	Selector map[string]string `json:"selector,omitempty"`
	Target   string            `json:"target,omitempty"`
	Since    time.Time         `json:"since"`
	Deadline time.Time         `json:"deadline"`
	// Place is the revision that orders the waiter when it is not the record's own: a retry of
	// a waiting acquire (same request ID) takes over the record, and its first try's place.
	Place uint64 `json:"place,omitempty"`
}

// WaitingReplica is the value of waiting.<replica> in lease_state: the heartbeat of a leaser
// replica that holds waiting acquires, with a short TTL. A waiter whose replica has none is
// dead: the others skip it and remove it.
type WaitingReplica struct {
	V       int       `json:"v"`
	Worker  string    `json:"worker,omitempty"`
	Waiting int       `json:"waiting"`
	At      time.Time `json:"at"`
}

// Availability is why no proxy could be leased, as numbers, so a crawler can tell "wait"
// from "misconfigured".
type Availability struct {
	Matched       int `json:"matched"`       // proxies whose attributes match the selector
	Ready         int `json:"ready"`         // of those, phase Ready
	AtCapacity    int `json:"atCapacity"`    // of those Ready, every slot taken (or maxLeases 0)
	CoolingTarget int `json:"coolingTarget"` // of those Ready, cooling down for this target
	CoolingGlobal int `json:"coolingGlobal"` // of those Ready, cooling down for every target
	// BelowAnonymity: of those Ready, less anonymous than the request's minAnonymity (or
	// not judged yet).
	BelowAnonymity int `json:"belowAnonymity,omitempty"`
	// NextAllowedAt is, when some of them cool down for this target (a block, or pacing),
	// when the first of those with a free slot may be granted again, where the leaser
	// knows it; a waiting acquire is woken then.
	NextAllowedAt time.Time `json:"nextAllowedAt,omitzero"`
}
