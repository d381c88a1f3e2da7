package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"testing"
)

// Unset, GOGC becomes defaultGCPercent; set by the operator, it is left alone.
func TestGCPercentDefault(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	log := slog.New(slog.DiscardHandler)

	t.Setenv("GOGC", "")
	setGCPercent(log)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC set (empty): percent %d, want it left at 100", got)
	}

	// t.Setenv cannot unset; LookupEnv sees an unset variable only without it.
	t.Setenv("GOGC", "x")
	unsetenv(t, "GOGC")
	setGCPercent(log)
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Fatalf("GOGC unset: percent %d, want %d", got, defaultGCPercent)
	}
}

// unsetenv removes key for the rest of the test (t.Setenv first, so it is restored).
func unsetenv(t *testing.T, key string) {
	t.Helper()
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}
