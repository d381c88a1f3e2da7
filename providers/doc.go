// Package providers is the contract between egressd's provisioners and the backends that run
// forward proxies: a Provider creates, reads, deletes and lists instances named
// deterministically from a proxy's UID and the installation ID, and classifies every error as
// NotFound, Quota, Transient or Permanent.
//
// This package imports only the standard library. Concrete providers live in sub-packages,
// import this one and their SDK, and never import NATS.
package providers
