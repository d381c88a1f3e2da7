// Package providertest holds what every provider's tests share: Run, the conformance suite
// that holds a providers.Provider to the contract (DESIGN.md §4), and Fake, a deterministic
// in-memory provider for the workers' tests.
//
// A provider package calls Run from its own tests with a Harness that builds fresh providers
// over a test backend. The suite puts SentinelUserData and SentinelPassword into every
// request it sends and fails if either shows up in an error or an Instance, so it also proves
// that user-data and credentials stay out of what callers may log.
//
// Like net/http/httptest, this package imports only the standard library, testing and the
// providers contract; it never imports NATS.
package providertest
