package events

import "time"

// goldenCases is one value of every record on the wire, by the name of its golden file in
// testdata. Between them the cases set every field of every record type (see
// TestGoldenCoversEveryField), so a renamed field or a changed shape shows in some file.
func goldenCases() map[string]any {
	op := Op{V: 1, ID: "op1", Kind: OpCreate, Proxy: "crawl-1", Provider: "local", Host: "local", UID: "u1",
		InstanceName: "egress-abcdefghijklmnop", SpecRevision: 7, SpecHash: "0123456789abcdef", IssuedAt: at}
	res := OpResult{V: 1, OpID: "op1", Kind: OpCreate, Proxy: "crawl-1", Provider: "local", Host: "local", Attempt: 1, Final: true,
		Instance: &Instance{ID: "local/egress-abcdefghijklmnop", Name: "egress-abcdefghijklmnop", State: "Running", Address: "127.0.0.2", Port: 3128, EgressIP: "127.0.0.2", UID: "u1", CreatedAt: at,
			ExpiresAt: at.Add(24 * time.Hour)},
		SpecHash: "0123456789abcdef", Worker: "host-1", StartedAt: at, At: at.Add(time.Second)}
	failed := OpResult{V: 1, OpID: "op3", Kind: OpGet, Proxy: "crawl-1", Provider: "local", Host: "local", Attempt: 2, Final: false,
		ErrorClass: ClassTransient, Error: "local get local/egress-abcdefghijklmnop: transient error: timeout", Worker: "host-1",
		StartedAt: at, At: at.Add(time.Second)}
	health := ProxyHealth{V: 1, Proxy: "crawl-1", Address: "127.0.0.2:3128", Healthy: false, ConsecutiveSuccesses: 4,
		ConsecutiveFailures: 3, SuccessThreshold: 1, FailureThreshold: 3, LatencyMs: 12.5,
		LastError: "CONNECT 127.0.0.1:41234: connection refused", EgressIP: "127.0.0.2", LeakedHeaders: []string{"Via", "X-Forwarded-For"},
		Anonymity: AnonymityTransparent, ExpectedEgress: "192.0.2.10",
		Paths: []PathCheck{
			{Path: PathConnect, Error: "CONNECT 127.0.0.1:41234: connection refused"},
			{Path: PathForward, EgressIP: "127.0.0.2", Leaked: []string{"Via", "X-Forwarded-For"}, Anonymity: AnonymityTransparent},
		},
		CheckURL: "http://127.0.0.1:41234/echo", Prober: "host-1", LastProbeAt: at, LastSuccessAt: at.Add(-time.Minute),
		LastTransitionAt: at}
	healthy := health
	healthy.Healthy, healthy.ConsecutiveSuccesses, healthy.ConsecutiveFailures, healthy.LastError = true, 1, 0, ""
	target := TargetHealth{V: 1, Provider: "kvm-home", Target: "h1", Order: 1, Address: "qemu+ssh://h1.lan/system", Ready: true,
		Reason: "Reachable", Message: "libvirt 10.0.0, pool default active", LatencyMs: 8.2,
		Details: map[string]string{"libvirt": "10.0.0"}, CheckedAt: at, LastTransitionTime: at.Add(-time.Hour), Checker: "host-1"}
	scaleInputs := ScaleInputs{Held: 8, Waiting: 6, Refused: 2, GrantsPerSecond: 1.5, Members: 3, Ready: 2, Capacity: 8, Target: 0.8,
		Wanted: 5, Leasers: 2}
	return map[string]any{
		// Ops and their results (OPS_<provider>, egress.events.op.>).
		"op.v1.json": op,
		"op_delete.v1.json": Op{V: 1, ID: "op4", Kind: OpDelete, Proxy: "crawl-1", Provider: "local", Host: "local", UID: "u1",
			InstanceName: "egress-abcdefghijklmnop", InstanceID: "local/egress-abcdefghijklmnop", SpecRevision: 8, IssuedAt: at},
		// A create since instances have generations (op.v1.json is one from before).
		"op_create_generation.v1.json": Op{V: 1, ID: "op5", Kind: OpCreate, Proxy: "crawl-1", Provider: "local", Host: "local",
			UID: "u1", InstanceName: "egress-abcdefghijklmnop", SpecRevision: 9, SpecHash: "0123456789abcdef",
			Generation: "9f3a0c1d2e4b5a68", IssuedAt: at},
		"op_result.v1.json":       res,
		"op_result_error.v1.json": failed,

		// Records in the buckets.
		"proxy_status.v1.json": ProxyStatus{V: 1, Phase: PhaseRunning, Mode: "managed", UID: "u1", InstanceName: "egress-abcdefghijklmnop",
			InstanceID: "local/egress-abcdefghijklmnop", Provider: "local", Host: "local", IP: "127.0.0.2", Port: 3128, ExpectedEgress: "127.0.0.2",
			SpecHash: "0123456789abcdef", SpecRevision: 7, Op: &OpRef{Kind: OpGet, ID: "op2", Host: "local", IssuedAt: at, Attempts: 1},
			LastError:   &LastError{Class: ClassTransient, Message: "local get: transient error: timeout", At: at},
			ProvisionAt: at, AddressAt: at, NextPollAt: at.Add(2 * time.Minute), CreatedAt: at, UpdatedAt: at, ExpiresAt: at.Add(24 * time.Hour)},
		"proxy_status_replacing.v1.json": ProxyStatus{V: 1, Phase: PhaseReplacing, Mode: "managed", UID: "u1",
			InstanceName: "egress-abcdefghijklmnop", Provider: "local", Host: "local", IP: "127.0.0.2", Port: 3128,
			SpecHash: "0123456789abcdef", AuthHash: "fedcba9876543210", SpecRevision: 9, Teardown: ReasonSpecChanged,
			Reason: ReasonTransient, Message: "local delete: transient error: busy", Failures: 2, Deadlines: 1, AddrMisses: 1,
			RetryAt: at.Add(4 * time.Second), ReadyAt: at.Add(-time.Hour), CreatedAt: at.Add(-2 * time.Hour), UpdatedAt: at},
		"proxy_status_suspect.v1.json": ProxyStatus{V: 1, Phase: PhaseUnhealthy, Mode: "managed", UID: "u2",
			InstanceName: "egress-bcdefghijklmnopq", InstanceID: "local/egress-bcdefghijklmnopq", Provider: "local", Host: "local",
			IP: "127.0.0.3", Port: 3128, SpecHash: "0123456789abcdef", SpecRevision: 3, Reason: ReasonProbeFailing,
			Message: "read CONNECT answer: i/o timeout", ProvisionAt: at.Add(-time.Hour), AddressAt: at.Add(-time.Hour),
			CreatedAt: at.Add(-time.Hour), UpdatedAt: at, Pool: "web",
			Suspect: Suspect{Scope: SuspectTarget, Name: "local/local", Unhealthy: 7, Total: 10}},
		// A status since instances have generations, which lease tokens name.
		"proxy_status_generation.v1.json": ProxyStatus{V: 1, Phase: PhaseReady, Mode: "managed", UID: "u1",
			InstanceName: "egress-abcdefghijklmnop", InstanceID: "local/egress-abcdefghijklmnop", Provider: "local", Host: "local",
			IP: "127.0.0.2", Port: 3128, SpecHash: "0123456789abcdef", AuthHash: "fedcba9876543210", SpecRevision: 9,
			ProvisionAt: at, Generation: "9f3a0c1d2e4b5a68", AddressAt: at, CreatedAt: at, ReadyAt: at, UpdatedAt: at},
		"lease_revocation.v1.json": LeaseRevocation{V: 1, Lease: "crawl-1.0.0123456789abcdef", Proxy: "crawl-1",
			Until: at.Add(time.Minute + 5*time.Second), Reason: ReasonReleased},
		"proxy_health.v1.json":  healthy,
		"target_health.v1.json": target,
		"provider_catalog.v1.json": CatalogRecord{V: 1, Provider: "kvm-home", Type: "libvirt",
			Hosts:        []CatalogHost{{Name: "h1", MaxConcurrentOps: 4}, {Name: "h2", MaxConcurrentOps: 2}},
			MachineTypes: map[string]MachineType{"small": {VCPUs: 1, MemoryMiB: 512}}, Images: []string{"debian-13"},
			Limits: map[string]int{"instances": 40}, UpdatedAt: at},
		"prober_member.v1.json": ProberMember{V: 1, ID: "3f9a0c1d2e4b5a69", Worker: "host-1", Filters: []string{"local", "kvm-home.h1"},
			Concurrency: 64, StartedAt: at, Owned: 5000, Backlog: 12, LagSeconds: 0.4, ProbePathDown: true},
		"lease.v1.json": Lease{V: 1, Proxy: "crawl-1", Slot: 1, Token: "0123456789abcdef", TTLSeconds: 60, Holder: "crawler-7",
			Target: "example.com", Sticky: "session-42", AcquiredAt: at, ExpiresAt: at.Add(time.Minute)},
		// A lease granted since leases record what they were granted against; lease.v1.json
		// is one from before, which must still read.
		"lease_granted_against.v1.json": Lease{V: 1, Proxy: "crawl-1", Slot: 1, Token: "0123456789abcdef", TTLSeconds: 60,
			Holder: "crawler-7", AcquiredAt: at, ExpiresAt: at.Add(time.Minute),
			SpecRevision: 41, StatusRevision: 97, Instance: "local/egress-crawl-1@2026-11-30T10:58:00Z"},
		"slot_end.v1.json": SlotEnd{V: 1, Token: "0123456789abcdef", End: ReasonProxyReplaced},
		"cooldown.v1.json": Cooldown{V: 1, Proxy: "crawl-1", Target: "example.com", Result: ReportBlocked, Holder: "crawler-7",
			Until: at.Add(10 * time.Minute)},
		"lock.v1.json": LockRecord{V: 1, Holder: "host-1", Purpose: "leader", Acquired: at},
		// A pool rotating: one member drains for its successor, one is still being created,
		// one is leaving after a scale-down.
		"pool_status.v1.json": PoolStatus{V: 1, Phase: PoolProgressing, Reason: ReasonRotationHeld,
			Message: "crawl-7xk2q waits: minAvailable 2 and maxSurge 1 leave no room", SpecRevision: 12, Replicas: 2, MaxMembers: 3,
			Members: []PoolMember{
				{Name: "crawl-a1b2c", Placement: 0, CreatedAt: at.Add(-6 * time.Hour), RotateAt: at.Add(-time.Minute), Rev: 31,
					Retire: ReasonMaxAge, Successor: "crawl-d3e4f", DrainingSince: at.Add(-30 * time.Second), DrainSeen: at.Add(-29 * time.Second)},
				{Name: "crawl-d3e4f", Placement: 1, CreatedAt: at.Add(-2 * time.Minute), RotateAt: at.Add(5 * time.Hour), Rev: 40},
				{Name: "crawl-g5h6j", Placement: 0, CreatedAt: at.Add(-3 * time.Hour), Rev: 22, Retire: ReasonScaleDown, Deleting: true},
			},
			NextRotation: at.Add(5 * time.Hour), UpdatedAt: at},
		"pool_status_autoscale.v1.json": PoolStatus{V: 1, Phase: PoolReady, Message: "2 of 2 members Ready", SpecRevision: 3, Replicas: 2, MaxMembers: 3,
			Members: []PoolMember{{Name: "web-a1b2c", CreatedAt: at.Add(-time.Hour), Rev: 5}, {Name: "web-d3e4f", CreatedAt: at.Add(-time.Minute), Rev: 9}},
			Autoscale: &PoolAutoscale{Desired: 2, Inputs: scaleInputs, LowSince: at.Add(-time.Minute), NextScaleDown: at.Add(4 * time.Minute),
				Held: "every member above 1 holds a lease: the count goes down as leases end", LastDecision: "0 → 2: 1 refused, 0/0 leased, target 0.8",
				LastDecisionAt: at.Add(-time.Hour)},
			UpdatedAt: at},
		"pool_demand.v1.json": PoolDemand{V: 1, Leaser: "3f9a0c1d2e4b5a69", Pool: "web", WindowSeconds: 30, Held: 8, Waiting: 6, Refused: 2,
			Granted: 45, GrantsPerSecond: 1.5, At: at},
		"pool_demand_selector.v1.json": PoolDemand{V: 1, Leaser: "3f9a0c1d2e4b5a69", Selector: map[string]string{"geo": "de"}, WindowSeconds: 30, Refused: 1, At: at},
		"demand_sum.v1.json":           DemandSum{Selector: map[string]string{"geo": "de"}, Held: 8, Waiting: 6, Refused: 3, Granted: 45, GrantsPerSecond: 1.5, Leasers: 2},

		// Core NATS.
		"probe_request.v1.json": ProbeRequest{V: 1, Proxy: "crawl-1", Provider: "local", Host: "local", Address: "127.0.0.2",
			Port: 3128, Reason: ReasonReport, At: at},

		// Every kind of event on EGRESS_EVENTS.
		"event_op.v1.json": Event{V: 1, ID: "e1", Kind: KindOpResult, Proxy: "crawl-1", At: at, Op: &res},
		"event_phase.v1.json": Event{V: 1, ID: "e2", Kind: KindPhase, Proxy: "crawl-1", At: at, From: PhaseProvisioning,
			Phase: PhaseRunning},
		"event_phase_reason.v1.json": Event{V: 1, ID: "e4", Kind: KindPhase, Proxy: "crawl-2", At: at, From: PhaseProvisioning,
			Phase: PhaseWaiting, Reason: ReasonQuota, Message: "local create: quota exceeded: no free address"},
		"event_deleted.v1.json": Event{V: 1, ID: "e5", Kind: KindDeleted, Proxy: "crawl-1", At: at, From: PhaseDeleting,
			Reason: ReasonProxyDeleted, Message: "proxy and instance removed"},
		"event_health.v1.json": Event{V: 1, ID: "e6", Kind: KindHealth, Proxy: "crawl-1", At: at, Reason: ReasonUnhealthy,
			Message: health.LastError, Health: &health},
		"event_lease.v1.json": Event{V: 1, ID: "granted:crawl-1.1.0123456789abcdef", Kind: KindLease, Proxy: "crawl-1", At: at,
			Reason: ReasonGranted, Lease: &LeaseEvent{ID: "crawl-1.1.0123456789abcdef", Holder: "crawler-7", Target: "example.com",
				Until: at.Add(time.Minute)}},
		"event_lease_ended.v1.json": Event{V: 1, ID: "ended:crawl-1.1:97", Kind: KindLease, Proxy: "crawl-1", At: at,
			Reason: ReasonProxyReplaced, Lease: &LeaseEvent{ID: "crawl-1.1.0123456789abcdef", Holder: "crawler-7", Until: at,
				AcquiredAt: at.Add(-time.Minute)}},
		"event_report.v1.json": Event{V: 1, ID: "report:crawl-1.1.0123456789abcdef:aa", Kind: KindReport, Proxy: "crawl-1", At: at,
			Reason: Reason(ReportBlocked), Lease: &LeaseEvent{ID: "crawl-1.1.0123456789abcdef", Holder: "crawler-7",
				Target: "example.com", Result: ReportBlocked, Until: at.Add(10 * time.Minute)}},
		"event_gc.v1.json": Event{V: 1, ID: "gc:local/egress-x:2026-11-30T11:00:00Z", Kind: KindGC, Proxy: "egress-x", At: at, Reason: ReasonOrphanDeleted,
			Message: "deleted instance local/egress-x (uid u9) that no proxy owns",
			GC: &GCDeletion{Provider: "local", Host: "local", ID: "local/egress-x", Name: "egress-x", UID: "u9", Kind: GCInstance,
				CreatedAt: at.Add(-time.Hour)}},
		"event_gc_lifetime.v1.json": Event{V: 1, ID: "gc:local/egress-y:2026-11-30T11:59:40Z", Kind: KindGC, Proxy: "egress-y", At: at,
			Reason: ReasonLifetimeExceeded, Message: "deleted instance local/egress-y (uid u8): its lifetime (20s from its creation at 2026-11-30T11:59:40Z) ended at 2026-11-30T12:00:00Z",
			GC: &GCDeletion{Provider: "local", Host: "local", ID: "local/egress-y", Name: "egress-y", UID: "u8", Kind: GCInstance,
				CreatedAt: at.Add(-20 * time.Second), ExpiresAt: at}},
		"event_provider.v1.json": Event{V: 1, ID: "provider:kvm-home.h1:1", Kind: KindProvider, Proxy: "kvm-home", At: at,
			Reason: Reason(target.Reason), Message: target.Message, Target: &target},
		"event_progress.v1.json": Event{V: 1, ID: "progress:kvm-home:h1:debian-13:1", Kind: KindProgress, Proxy: "kvm-home", At: at,
			Reason: "download", Message: "download of image debian-13 on h1: 120 MiB of 400 MiB"},
		"event_pool.v1.json": Event{V: 1, ID: "pool:5d1c0a3f9e8b7a6c", Kind: KindPool, Proxy: "crawl", At: at,
			Reason: ReasonDrainStarted, Message: "member crawl-a1b2c is draining (MaxAge): crawl-d3e4f is Ready in its place",
			Pool: &PoolEvent{Pool: "crawl", Member: "crawl-a1b2c", Successor: "crawl-d3e4f", Leases: 2}},
		"event_pool_scale.v1.json": Event{V: 1, ID: "pool:6e2d1b4a0f9c8b7d", Kind: KindPool, Proxy: "web", At: at,
			Reason: ReasonScaledUp, Message: "autoscale 3 → 5: 6 waiting, 8/8 leased, target 0.8",
			Pool: &PoolEvent{Pool: "web", Scale: &PoolScale{From: 3, To: 5, Inputs: scaleInputs}}},
		"event_prober.v1.json": Event{V: 1, ID: "e3", Kind: KindProber, Proxy: "3f9a0c1d2e4b5a69", At: at, Reason: ReasonProberBehind,
			Prober: &ProberLag{Worker: "host-1", Owned: 5000, Backlog: 1200, LagSeconds: 16.5, Concurrency: 1}},

		// Lease statistics (EGRESS_LEASE_STATS).
		"lease_stats.v1.json": LeaseStats{V: 1, Leaser: "3f9a0c1d2e4b5a69", From: at, To: at.Add(time.Minute), Part: 1,
			Rows: []LeaseStatsRow{{Proxy: "crawl-1", Target: "example.com", Provider: "local", Pool: "crawl",
				LeaseCounts: LeaseCounts{Granted: 9, Renewed: 4, Released: 7, Expired: 1, Ended: 1, OK: 5, Blocked: 2, Failed: 1}}}},

		// The lease service: requests, replies and errors.
		"lease_acquire_request.v1.json": AcquireRequest{Selector: map[string]string{"geo": "de"}, Target: "example.com",
			TTLSeconds: 60, Holder: "crawler-7", Sticky: "session-42", MinAnonymity: AnonymityElite},
		"lease_reply.v1.json": LeaseReply{Lease: LeaseGrant{ID: "crawl-1.1.0123456789abcdef", Proxy: "crawl-1", Host: "127.0.0.2",
			Port: 3128, URL: "http://127.0.0.2:3128", ExpiresAt: at.Add(time.Minute), TTLSeconds: 60}},
		"lease_renew_request.v1.json":          RenewRequest{ID: "crawl-1.1.0123456789abcdef", TTLSeconds: 120},
		"lease_release_request.v1.json":        ReleaseRequest{ID: "crawl-1.1.0123456789abcdef"},
		"lease_release_reply.v1.json":          ReleaseReply{Released: true},
		"lease_release_reply_not_held.v1.json": ReleaseReply{Reason: "lease crawl-1.1.0123456789abcdef is unknown or has expired"},
		"lease_report_request.v1.json": ReportRequest{ID: "crawl-1.1.0123456789abcdef", Result: ReportBlocked, Target: "example.com",
			CooldownSeconds: 600, Release: true},
		"lease_report_reply.v1.json": ReportReply{CooldownUntil: at.Add(10 * time.Minute), Released: true},
		"lease_error_bad_request.v1.json": ErrorReply{Error: ErrorDetail{Code: CodeBadRequest, Message: "ttlSeconds: must be between 1 and 3600",
			Field: "ttlSeconds"}},
		"lease_error_gone.v1.json": ErrorReply{Error: ErrorDetail{Code: CodeGone, Field: "id", End: ReasonProxyDeleted,
			Message: "lease crawl-1.1.0123456789abcdef was ended: its proxy was deleted"}},
		"lease_error_unavailable.v1.json": ErrorReply{Error: ErrorDetail{Code: CodeUnavailable, Message: "no proxy available",
			Availability: &Availability{Matched: 5, Ready: 4, AtCapacity: 2, CoolingTarget: 1, CoolingGlobal: 1, BelowAnonymity: 3}}},

		// Sessions, strategies and holder caps.
		"lease_acquire_session_request.v1.json": AcquireRequest{Selector: map[string]string{"geo": "de"}, Target: "example.com",
			TTLSeconds: 60, Holder: "crawler-7", Sticky: "session-42", Strategy: StrategyRoundRobin, SessionSeconds: 600, StickyMode: StickyStrict},
		"lease_error_holder_at_cap.v1.json": ErrorReply{Error: ErrorDetail{Code: CodeTooMany, Reason: ErrorHolderAtCap, Limit: 2,
			Message:      `holder "crawler-7" holds 2 leases in pool crawl, its limit (maxPerHolder); release one or wait for one to expire`,
			Availability: &Availability{Matched: 5, Ready: 5}}},
		"lease_error_session_unavailable.v1.json": ErrorReply{Error: ErrorDetail{Code: CodeUnavailable, Reason: ErrorSessionUnavailable,
			Message: `sticky session "session-42" is bound to proxy crawl-1 until 2026-11-30T12:10:00Z, and it is Unhealthy; stickyMode strict does not move it to another proxy`,
			Session: &SessionDetail{Proxy: "crawl-1", Cause: SessionProxyNotReady, Phase: PhaseUnhealthy, Until: at.Add(10 * time.Minute)}}},
		// Acquires that wait (docs/leases.md#waiting).
		"lease_acquire_wait_request.v1.json": AcquireRequest{Selector: map[string]string{"pool": "crawl"}, Target: "example.com", WaitSeconds: 30},
		// Idempotent acquires (docs/leases.md#retries).
		"lease_acquire_retry_request.v1.json": AcquireRequest{Selector: map[string]string{"pool": "crawl"}, Holder: "crawler-7",
			RequestID: "5f0c2a9e8b7d4c31a6e2f90b1d3c7a48"},
		"lease_error_internal.v1.json": ErrorReply{Error: ErrorDetail{Code: CodeInternal, Message: "internal error in the lease service; retry",
			Retry: true}},
		"lease_request.v1.json": LeaseRequest{V: 1, Holder: "crawler-7", RequestID: "5f0c2a9e8b7d4c31a6e2f90b1d3c7a48",
			Lease: "crawl-1.1.0123456789abcdef", At: at},
		"lease_error_wait_timed_out.v1.json": ErrorReply{Error: ErrorDetail{Code: CodeUnavailable,
			Message:      "no proxy available after waiting 30.0s (place 2 of 5 waiting): 3 match the selector, 3 of them Ready, 3 at capacity, 0 cooling down for this target, 0 cooling down for every target",
			Availability: &Availability{Matched: 3, Ready: 3, AtCapacity: 3},
			Wait:         &WaitDetail{WaitedSeconds: 30.002, Position: 2, Waiting: 5, Cause: WaitTimedOut, Until: ptr(at.Add(30 * time.Second))}}},
		"lease_waiter.v1.json": Waiter{V: 1, Replica: "89abcdef01234567", Worker: "leaser-1", Holder: "crawler-7",
			Selector: map[string]string{"pool": "crawl"}, Target: "example.com", Since: at, Deadline: at.Add(30 * time.Second), Place: 4711},
		"lease_waiting_replica.v1.json": WaitingReplica{V: 1, Worker: "leaser-1", Waiting: 5, At: at},
		"lease_session.v1.json":         Session{V: 1, Sticky: "session-42", Proxy: "crawl-1", BoundAt: at, Until: at.Add(10 * time.Minute)},
		"lease_holder_slot.v1.json":     HolderSlot{V: 1, Holder: "crawler-7", Pool: "crawl", Token: "89abcdef01234567"},
		"lease_held.v1.json": Lease{V: 1, Proxy: "crawl-1", Slot: 1, Token: "0123456789abcdef", TTLSeconds: 60,
			Holder: "crawler-7", Sticky: "session-42", AcquiredAt: at, ExpiresAt: at.Add(time.Minute), SpecRevision: 12, StatusRevision: 40,
			Instance: "i-1@2026-11-30T11:00:00Z", Hold: &LeaseHold{Key: "holder.crawl.Y3Jhd2xlci03.0", Token: "89abcdef01234567"},
			RequestID: "5f0c2a9e8b7d4c31a6e2f90b1d3c7a48"},
	}
}

func ptr[T any](v T) *T { return &v }
