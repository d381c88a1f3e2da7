package events

// ErrorClass is how an op's error is classified on the wire, in OpResult.ErrorClass and
// LastError.Class. Every reader (settlement, the reconciler, the summaries) switches on these
// constants; the mapping from a provider's error to its class lives in workers.ClassOf.
type ErrorClass string

// Error classes. The empty class is success.
const (
	ClassNone      ErrorClass = ""
	ClassNotFound  ErrorClass = "NotFound"  // the instance is truly gone
	ClassQuota     ErrorClass = "Quota"     // the backend has no room now
	ClassTransient ErrorClass = "Transient" // retrying may succeed
	ClassPermanent ErrorClass = "Permanent" // retrying will not help until the spec or config changes
	ClassStale     ErrorClass = "Stale"     // a provisioner dropped the op because the spec moved on
)
