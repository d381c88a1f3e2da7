package events

import "slices"

// Bucket names (DESIGN §3.1).
const (
	BucketProxies   = "proxies"
	BucketCloudInit = "cloud_init"
	BucketStatus    = "proxy_status"
	BucketCatalog   = "provider_catalog"
	BucketLocks     = "egress_locks"
)

// Stream names and subject roots (DESIGN §3.2). Events are split over two streams by kind
// (LeaseKinds on StreamLeaseEvents, every other kind on StreamEvents) so that the lease
// traffic of a busy fleet cannot push the lifecycle history out; EventsSubjects still covers
// both, for subscribers.
const (
	StreamEvents      = "EGRESS_EVENTS"
	StreamLeaseEvents = "EGRESS_LEASE_EVENTS"
	EventsSubjects    = "egress.events.>"
	opsPrefix         = "egress.ops."
	eventsPrefix      = "egress.events."
)

// Lock keys in the egress_locks bucket, and the keys holding the installation ID and the
// lease master (the secret that lease tokens are signed with, internal/leaseauth; readable by
// the provisioners, probers and leasers only, deploy/nats).
const (
	LockLeaderReconciler = "leader.reconciler"
	KeyInstallation      = "installation"
	KeyLeaseMaster       = "lease-master"
)

// OpsStream is the work-queue stream of one provider's ops.
func OpsStream(provider string) string { return "OPS_" + provider }

// OpsSubjects is the subject filter of OpsStream(provider).
func OpsSubjects(provider string) string { return opsPrefix + provider + ".>" }

// OpSubject is where the op for proxy on provider's host is published.
func OpSubject(provider, host, proxy string) string {
	return opsPrefix + provider + "." + host + "." + proxy
}

// HostFilter is the filter of the per-host consumer.
func HostFilter(provider, host string) string { return opsPrefix + provider + "." + host + ".>" }

// HostConsumer is the durable name of the per-host consumer.
func HostConsumer(host string) string { return "host_" + host }

// OpLockKey is the per-proxy op lock in egress_locks.
func OpLockKey(proxy string) string { return "op." + proxy }

// EventSubject is where an event of kind about proxy is published.
func EventSubject(kind EventKind, proxy string) string {
	return eventsPrefix + string(kind) + "." + proxy
}

// OpResultSubjects is the filter the reconciler folds op results from.
const OpResultSubjects = eventsPrefix + string(KindOpResult) + ".>"

// GCLockKey is held by the one provisioner that sweeps a host for orphans this round.
func GCLockKey(provider, host string) string { return "gc." + provider + "." + host }

// CheckLockKey is held by the one provisioner that checks a provider's targets this round.
func CheckLockKey(provider string) string { return "check." + provider }

// Subject templates: the shapes of OpSubject and EventSubject with their variable tokens
// named, for where a subject must be told without its proxy name (trace span names).
const (
	OpSubjectTemplate       = opsPrefix + "{provider}.{host}.{proxy}"
	OpResultSubjectTemplate = eventsPrefix + string(KindOpResult) + ".{proxy}"
)

// LeaseKinds are the kinds published at the rate of lease cycles, kept on StreamLeaseEvents
// with a short retention of their own.
var LeaseKinds = []EventKind{KindLease, KindReport}

// IsLeaseKind tells whether k is one of LeaseKinds.
func IsLeaseKind(k EventKind) bool { return slices.Contains(LeaseKinds, k) }

// EventStream is the stream that stores the events of kind k.
func EventStream(k EventKind) string {
	if IsLeaseKind(k) {
		return StreamLeaseEvents
	}
	return StreamEvents
}

// EventStreamSubjects are the subjects StreamEvents (lifecycle) or StreamLeaseEvents (lease
// kinds) captures: one egress.events.<kind>.> per kind, so the two never overlap.
func EventStreamSubjects(stream string) []string {
	var out []string
	for _, k := range Kinds {
		if EventStream(k) == stream {
			out = append(out, eventsPrefix+string(k)+".>")
		}
	}
	return out
}
