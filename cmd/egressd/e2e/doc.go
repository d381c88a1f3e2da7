// Package e2e holds egressd's end-to-end, cluster, bench and soak tests. They are black-box:
// TestMain builds cmd/egressd once, and every test drives that binary (and the real nats CLI,
// nats-server, Squid, Chromium where a test needs them) through its commands, flags,
// environment, exit codes and output, and reads what it wrote to NATS. Nothing here imports
// package main. The cluster tests' harness is cluster_harness_test.go; the single-process
// one is e2e_harness_test.go.
package e2e
