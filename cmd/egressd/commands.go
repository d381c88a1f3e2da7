package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/egressd/egressd/providers/local/forwardproxy"
)

// Adding a command is one entry in the table below and one file holding its run function;
// dispatch, the usage text (egressd help, egressd with no arguments) and a command's own -h
// lines all read the table, and TestUsageListsEveryCommand holds docs/cli.md to it.

// command is one entry of the one table that both dispatch and the usage text read, so that
// neither can list a command the other does not.
type command struct {
	name string
	help []helpLine // one line or more in the usage text
	run  func(ctx context.Context, args []string, sio stdio) int
}

// helpLine is a usage line: what follows "egressd ", and what it does.
type helpLine struct{ synopsis, summary string }

// commands is every command, in the order the usage text lists them. It is filled in init:
// help reads the table it is part of.
var commands []command

func init() {
	commands = []command{
		{"run", []helpLine{{"run [flags]", "run every role with an embedded NATS server (or --nats-url)"}},
			func(ctx context.Context, a []string, s stdio) int { return runCmd(ctx, a, s.errOut) }},
		{"gateway", []helpLine{{"gateway --nats-url URL --gateway-listen ADDR --config F", "the gateway alone: one forward proxy endpoint for any HTTP client, leasing through NATS"}},
			func(ctx context.Context, a []string, s stdio) int { return gatewayCmd(ctx, a, s.errOut) }},
		{"setup", []helpLine{{"setup [flags]", "declare buckets, streams and consumers on a shared NATS (admin)"}},
			func(ctx context.Context, a []string, s stdio) int { return setupCmd(ctx, a, s.out, s.errOut) }},
		{"validate", []helpLine{{"validate proxy|pool FILE [--config F]", "check a proxy or pool document (- for stdin); every error names its field"}},
			validateCmd},
		{"apply", []helpLine{{"apply proxy|pool NAME FILE", "check a document as validate does, then write it to proxies or pools"}},
			applyCmd},
		{"delete", []helpLine{{"delete proxy|pool NAME", "delete a proxy (its instance goes) or a pool (its members go)"}},
			deleteCmd},
		{"lease", []helpLine{{"lease " + strings.Join(leaseSubcommands, "|") + " [flags]", "lease proxies from a shell script"},
			{"lease token CRAWLER-NAME", "a bearer token for the lease HTTP face, and its config entry"}},
			func(ctx context.Context, a []string, s stdio) int { return leaseCmd(ctx, a, s.out, s.errOut) }},
		{"status", []helpLine{{"status [-o json] [--check]", "show proxies: phase, address, health, leases, reason, age"},
			{"status pools", "show pools: desired, ready, leased and draining members, next rotation"},
			{"status providers", "show providers: instances against limits, creates, brake; targets: check, instances"},
			{"status probers", "show the live probers: their share of the fleet and lag"},
			{"status cooldowns", "show running cooldowns: proxy, target, report, strikes, who, until"},
			{"status holders", "show who holds leases: leases, proxies, targets, sessions"},
			{"status leases [--holder h]", "show every held lease: holder, proxy, target, session, expiry"},
			{"status leasekeys", "show the lease master rotation and which masters each lease-mode proxy holds"},
			{"status rollouts", "show the rollouts under way: replaced, draining, waiting, paused"},
			{"status quarantine", "show the burned addresses in quarantine: prefix, pool, burned member, until"}},
			func(ctx context.Context, a []string, s stdio) int { return statusCmd(ctx, a, s.out, s.errOut) }},
		{"stats", []helpLine{{"stats [--since 1h] [--by target|proxy|provider|pool] [--json]", "block rates from the leasers' statistics over a window"}},
			func(ctx context.Context, a []string, s stdio) int { return statsCmd(ctx, a, s.out, s.errOut) }},
		{"events", []helpLine{{"events [-f] [--since 1h] [--kind k] [--proxy p]", "follow what happens, in a human-readable form"}},
			func(ctx context.Context, a []string, s stdio) int { return eventsCmd(ctx, a, s.out, s.errOut) }},
		{"forward-proxy", []helpLine{{"forward-proxy [flags]", "the forward proxy the local provider runs"}},
			func(ctx context.Context, a []string, s stdio) int { return forwardproxy.Main(ctx, a, s.errOut) }},
		{"squid-auth", []helpLine{{"squid-auth --key-file F [--revocations-file L]", "a Squid basic-auth helper that checks lease tokens"}},
			func(_ context.Context, a []string, s stdio) int { return squidAuthCmd(a, s.in, s.out, s.errOut) }},
		{"lease-key", []helpLine{{"lease-key --proxy P [--out F]", "write a proxy's lease key, for squid-auth (admin)"}},
			func(ctx context.Context, a []string, s stdio) int { return leaseKeyCmd(ctx, a, s.out, s.errOut) }},
		{"lease-master", []helpLine{{"lease-master status|rotate|switch|retire [flags]", "rotate the lease master without refusing a valid lease (admin)"}},
			func(ctx context.Context, a []string, s stdio) int { return leaseMasterCmd(ctx, a, s.out, s.errOut) }},
		{"lease-revocations", []helpLine{{"lease-revocations --out F [--proxy P]", "keep a lease revocation list fresh, for squid-auth"}},
			func(ctx context.Context, a []string, s stdio) int { return leaseRevocationsCmd(ctx, a, s.errOut) }},
		{"rollout", []helpLine{{"rollout pause|resume SCOPE", "pause or resume a rollout: provider NAME, pool NAME, or all"}},
			func(ctx context.Context, a []string, s stdio) int { return rolloutCmd(ctx, a, s.out, s.errOut) }},
		{"version", []helpLine{{"version", "print the version"}},
			func(_ context.Context, _ []string, s stdio) int { fmt.Fprintln(s.out, "egressd", version); return 0 }},
		{"help", []helpLine{{"help", "this text"}},
			func(_ context.Context, _ []string, s stdio) int { fmt.Fprint(s.out, usage()); return 0 }},
	}
}
