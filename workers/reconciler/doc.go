// Package reconciler is the one active reconciler: it watches desired proxies, folds op
// results into status, and turns the difference into ops. All lifecycle policy is in the
// pure function Decide; the rest of the package only gathers its inputs and carries out its
// decision (write the status with CAS, publish ops and events).
package reconciler
