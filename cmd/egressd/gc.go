package main

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// defaultGCPercent is the collector's target for `egressd run` when GOGC is not set: the
// heap may grow to 1.5× the live data between collections instead of Go's 2×. At 10,000
// proxies that keeps the all-in-one's RSS at 180 MiB instead of 243 (live heap 89 MiB), for
// a quarter longer convergence, still under half a probe interval (docs/performance.md,
// docs/decisions/0065-gogc-50.md). GOGC (or GOMEMLIMIT next to it) set by the operator wins.
const defaultGCPercent = 50

// setGCPercent applies defaultGCPercent unless the environment sets GOGC.
func setGCPercent(log *slog.Logger) {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	debug.SetGCPercent(defaultGCPercent)
	log.Debug("garbage collector target", "gcPercent", defaultGCPercent, "why", "GOGC is not set")
}
