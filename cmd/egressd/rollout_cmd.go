package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const rolloutUsage = `Usage: egressd rollout pause|resume SCOPE [--note TEXT] [--nats-url URL]

SCOPE is "provider NAME" (its proxies of their own), "pool NAME" (the pool's members), or
"all". A paused scope starts no new replacement for a rollout (docs/rollouts.md); a proxy
already draining or being replaced finishes. The pauses live in egress_locks, key
rollout-pause, and egressd status rollouts shows them.
`

func rolloutCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, rolloutUsage); fs.PrintDefaults() }
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server (credentials: "+envUser+", "+envPassword+")")
	note := fs.String("note", "", "why, shown with the pause")
	if len(args) == 0 || (args[0] != "pause" && args[0] != "resume") {
		fs.Usage()
		return 2
	}
	verb := args[0]
	scope, rest, err := rolloutScope(args[1:])
	if err != nil {
		fmt.Fprintln(stderr, "egressd rollout:", err)
		return 2
	}
	if code, ok := parseFlags(fs, rest); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "egressd rollout: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := setPause(ctx, *natsURL, scope, verb == "pause", *note); err != nil {
		fmt.Fprintln(stderr, "egressd rollout:", err)
		return 1
	}
	fmt.Fprintf(stdout, "rollout of %s %sd\n", scope, verb)
	return 0
}

// rolloutScope reads SCOPE off the front of args: the scope's key and what follows it.
func rolloutScope(args []string) (string, []string, error) {
	switch {
	case len(args) >= 1 && args[0] == "all":
		return "*", args[1:], nil
	case len(args) >= 2 && (args[0] == "provider" || args[0] == "pool"):
		if err := schemas.ValidName(args[1]); err != nil {
			return "", nil, fmt.Errorf("%s name: %w", args[0], err)
		}
		if args[0] == "pool" {
			return events.PoolScope(args[1]), args[2:], nil
		}
		return events.ProviderScope(args[1]), args[2:], nil
	}
	return "", nil, errors.New(`SCOPE is "provider NAME", "pool NAME" or "all"`)
}

// setPause pauses or resumes scope with a compare-and-set of the pause record, so two
// operators at once lose neither change.
func setPause(ctx context.Context, url, scope string, pause bool, note string) error {
	nc, err := dial(url, "egressd rollout", defaultDialTimeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	kv, err := js.KeyValue(ctx, events.BucketLocks)
	if err != nil {
		return fmt.Errorf("open %s: %w", events.BucketLocks, err)
	}
	for range 5 {
		var rec events.RolloutPause
		rev, err := kvstore.GetJSON(ctx, kv, events.RolloutPauseKey, &rec)
		if err != nil && !errors.Is(err, kvstore.ErrNotFound) {
			return err
		}
		rec.V = 1
		if rec.Scopes == nil {
			rec.Scopes = map[string]events.PausedScope{}
		}
		if pause {
			by, _ := os.Hostname()
			rec.Scopes[scope] = events.PausedScope{At: time.Now().UTC(), By: by, Note: note}
		} else {
			delete(rec.Scopes, scope)
		}
		if rev == 0 {
			_, err = kvstore.CreateJSON(ctx, kv, events.RolloutPauseKey, rec)
		} else {
			_, err = kvstore.UpdateJSON(ctx, kv, events.RolloutPauseKey, rec, rev)
		}
		if !errors.Is(err, kvstore.ErrConflict) {
			return err
		}
	}
	return errors.New("the pause record kept changing under this write; try again")
}
