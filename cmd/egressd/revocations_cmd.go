package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/egressd/egressd/schemas"
	"github.com/egressd/egressd/workers/provisioner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const leaseRevocationsUsage = `Usage: egressd lease-revocations --out FILE [--proxy PROXY] [--nats-url URL]

Follows the installation's lease revocations and keeps FILE (atomically replaced, mode 0644)
the current revocation list, for a proxy egressd does not deliver one to: an external Squid
whose egressd squid-auth runs with --revocations-file FILE (docs/leases.md#revocation). With
--proxy, only that proxy's leases are listed. It runs until interrupted; while NATS is out of
reach FILE keeps the last list, so the proxy goes on refusing what was revoked and passing the
rest. The NATS user needs read access to lease_state.
`

func leaseRevocationsCmd(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("lease-revocations", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, leaseRevocationsUsage); fs.PrintDefaults() }
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server")
	out := fs.String("out", "", "the revocation list `file` to keep fresh (required)")
	proxy := fs.String("proxy", "", "list only this proxy's leases (`name`)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 || *out == "" {
		fmt.Fprintln(stderr, "lease-revocations: --out is required, and no arguments")
		return 2
	}
	if *proxy != "" {
		if err := schemas.ValidName(*proxy); err != nil {
			fmt.Fprintln(stderr, "lease-revocations: proxy:", err)
			return 2
		}
	}
	if err := followRevocations(ctx, *natsURL, *proxy, *out, stderr); err != nil {
		fmt.Fprintln(stderr, "lease-revocations:", err)
		return 1
	}
	return 0
}

func followRevocations(ctx context.Context, natsURL, proxy, out string, stderr io.Writer) error {
	nc, err := dial(natsURL, "egressd lease-revocations", defaultDialTimeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, defaultDialTimeout)
	kv, err := js.KeyValue(bctx, events.BucketLeaseState)
	cancel()
	if err != nil {
		return fmt.Errorf("bind bucket %s (has `egressd setup` run?): %w", events.BucketLeaseState, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return provisioner.Revocations{KV: kv, Proxy: proxy, Log: log,
		Deliver: func(_ context.Context, list *leaseauth.Revocations) error {
			return forwardproxy.WriteRevocationsFile(out, list)
		}}.Run(ctx)
}
