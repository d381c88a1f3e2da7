package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/workers/leaser"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const leaseMasterUsage = `Usage: egressd lease-master status|rotate|switch|retire [flags]

Rotates the lease master that auth.mode "lease" tokens are signed with, without refusing a
valid lease (docs/leases.md#rotating-the-master, decision 88). Admin only: it reads and writes
the master.

  status   the phase (steady, spreading, retiring), the master IDs, and which masters each
           lease-mode proxy's keys derive from
  rotate   begin a rotation (a next master, delivered to every proxy beside the current one)
           or continue the one under way; with --wait (the default) drive it to its end:
           switch once every lease-mode proxy holds the next master, retire the previous one
           once every token it signed has expired (--max-ttl + 5 s skew + 10 s margin after
           the switch). Interrupted, run it again: it continues where the ring in NATS is.
  switch   sign new tokens with the next master (refused until every proxy holds it, unless
           --force: proxies without it then refuse the new tokens)
  retire   drop the previous master: tokens it signed are refused from then on (refused
           before its retirement time, unless --force: unexpired leases then fail)
`

type leaseMasterFlags struct {
	natsURL string
	maxTTL  time.Duration
	wait    bool
	force   bool
	asJSON  bool
	poll    time.Duration
}

func leaseMasterCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, leaseMasterUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("lease-master "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, leaseMasterUsage); fs.PrintDefaults() }
	var f leaseMasterFlags
	fs.StringVar(&f.natsURL, "nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server")
	fs.DurationVar(&f.maxTTL, "max-ttl", leaser.DefaultMaxTTL, "the longest lease TTL the leasers grant: how long the previous master's tokens may live after the switch")
	fs.BoolVar(&f.wait, "wait", true, "rotate: drive the rotation to its end")
	fs.BoolVar(&f.force, "force", false, "switch before the next master has spread, or retire before the previous one's tokens expired")
	fs.BoolVar(&f.asJSON, "json", false, "status: JSON")
	fs.DurationVar(&f.poll, "poll", time.Second, "rotate: how often to look at the proxies while waiting")
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	if fs.NArg() != 0 || !slices.Contains([]string{"status", "rotate", "switch", "retire"}, sub) {
		fmt.Fprint(stderr, leaseMasterUsage)
		return 2
	}
	if f.maxTTL <= 0 || f.poll <= 0 {
		fmt.Fprintln(stderr, "lease-master: --max-ttl and --poll must be positive")
		return 2
	}
	nc, err := dial(f.natsURL, "egressd lease-master", defaultDialTimeout)
	if err != nil {
		fmt.Fprintln(stderr, "lease-master:", err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err == nil {
		err = leaseMasterStep(ctx, js, sub, f, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "lease-master:", err)
		return 1
	}
	return 0
}

// errRaced: the ring changed between its read and the write (another step ran); read again.
var errRaced = errors.New("the lease masters changed meanwhile")

// errNotYet: a step whose condition does not hold, and --force was not given.
var errNotYet = errors.New("not yet")

func leaseMasterStep(ctx context.Context, js jetstream.JetStream, sub string, f leaseMasterFlags, out io.Writer) error {
	switch sub {
	case "status":
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		st, _, _, err := loadLeaseMasterState(rctx, js)
		if err != nil {
			return err
		}
		printLeaseMaster(out, st, f.asJSON)
		return nil
	case "rotate":
		return rotateLeaseMaster(ctx, js, f, out)
	}
	_, err := advanceLeaseMaster(ctx, js, sub, f, out)
	return err
}

// rotateLeaseMaster begins a rotation or continues the one under way, and with f.wait drives
// it through switch and retirement, each a compare-and-set on the ring: run twice at once or
// again after a kill, it takes up where the ring is.
func rotateLeaseMaster(ctx context.Context, js jetstream.JetStream, f leaseMasterFlags, out io.Writer) error {
	begun := false
	var said string
	reannounce(ctx, js, out)
	for {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		st, _, ring, err := loadLeaseMasterState(rctx, js)
		cancel()
		if err != nil {
			return err
		}
		step := map[string]string{leaseauth.PhaseSteady: "begin", leaseauth.PhaseSpreading: "switch", leaseauth.PhaseRetiring: "retire"}[ring.Phase()]
		if step == "begin" && begun {
			fmt.Fprintf(out, "rotation done: tokens are signed with master %s\n", ring.Current.ID())
			return nil
		}
		begun = true
		done, err := advanceLeaseMaster(ctx, js, step, f, out)
		switch {
		case errors.Is(err, errNotYet):
			if msg := waitingFor(st); msg != said {
				fmt.Fprintln(out, msg)
				said = msg
			}
		case err != nil && !errors.Is(err, errRaced):
			return err
		case done && step == "begin" && !f.wait:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while %s; run `egressd lease-master rotate` again to continue", ring.Phase())
		case <-time.After(f.poll):
		}
	}
}

// waitingFor says what a rotation waits for.
func waitingFor(st leaseMasterState) string {
	if st.Phase == leaseauth.PhaseRetiring {
		return fmt.Sprintf("retiring: master %s is refused after %s, when every token it signed has expired", st.Previous, st.RetireAfter.Format(time.RFC3339))
	}
	return fmt.Sprintf("spreading: %d of %d lease-mode proxies hold master %s; waiting for %s", len(st.Proxies)-len(st.Waiting), len(st.Proxies), st.Next, strings.Join(st.Waiting, ", "))
}

// advanceLeaseMaster takes one step (begin, switch, retire) if its condition holds (or with
// f.force), as a compare-and-set on the ring it read; it publishes the step's event. done
// false with a nil error: the ring was not in the step's phase (another run took it).
func advanceLeaseMaster(ctx context.Context, js jetstream.JetStream, step string, f leaseMasterFlags, out io.Writer) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	st, rev, ring, err := loadLeaseMasterState(ctx, js)
	if err != nil {
		return false, err
	}
	now := time.Now()
	var next leaseauth.Ring
	switch step {
	case "begin":
		next, err = ring.Begin(leaseauth.NewMaster(), now)
	case "switch":
		if ring.Phase() == leaseauth.PhaseSpreading && len(st.Waiting) > 0 && !f.force {
			return false, fmt.Errorf("%w: %s", errNotYet, waitingFor(st))
		}
		next, err = ring.Switch(now, f.maxTTL, leaseMasterMargin)
	case "retire":
		if ring.Phase() == leaseauth.PhaseRetiring && now.Before(ring.RetireAfter) && !f.force {
			return false, fmt.Errorf("%w: %s", errNotYet, waitingFor(st))
		}
		next, err = ring.Retire(now)
	default:
		return false, fmt.Errorf("unknown step %q", step)
	}
	if err != nil {
		return false, err
	}
	locks, err := js.KeyValue(ctx, events.BucketLocks)
	if err != nil {
		return false, err
	}
	if _, err := locks.Update(ctx, events.KeyLeaseMaster, next.Encode(), rev); err != nil {
		return false, fmt.Errorf("%w: %w", errRaced, err)
	}
	announceStep(ctx, js, ring, next, out)
	return true, nil
}

// reannounce, continuing a rotation, announces its phase again, in case a kill came between
// the step's write and its event (the event's ID makes it one event).
func reannounce(ctx context.Context, js jetstream.JetStream, out io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	locks, err := js.KeyValue(ctx, events.BucketLocks)
	if err != nil {
		return // the loop's own read says why
	}
	if ring, _, err := readLeaseRing(ctx, locks); err == nil && ring.Phase() != leaseauth.PhaseSteady {
		announceStep(ctx, js, leaseauth.Ring{}, ring, out)
	}
}

// announceStep publishes the event of the step that took before to after, then prints it.
// The event's ID is the step's (its reason and the master it concerns), so that a rotate
// continuing after a kill between the write and the event announces the step again
// (rotateLeaseMaster) without a second event within the stream's duplicate window.
func announceStep(ctx context.Context, js jetstream.JetStream, before, after leaseauth.Ring, out io.Writer) {
	var reason events.Reason
	var msg, master string
	switch after.Phase() {
	case leaseauth.PhaseSpreading:
		reason, master = events.ReasonRotationBegun, after.Next.ID()
		msg = "master " + master + " spreads to the lease-mode proxies beside " + after.Current.ID()
	case leaseauth.PhaseRetiring:
		reason, master = events.ReasonKeySwitched, after.Current.ID()
		msg = "new lease tokens are signed with master " + master + "; " + after.Previous.ID() + " is accepted until " + after.RetireAfter.Format(time.RFC3339)
	default:
		reason, master = events.ReasonKeyRetired, before.Previous.ID()
		msg = "master " + master + " is retired: tokens it signed are refused"
	}
	ev := events.Event{V: 1, ID: "leasemaster:installation:" + string(reason) + ":" + master, Kind: events.KindLeaseMaster,
		Proxy: "installation", At: after.Since.UTC(), Reason: reason, Message: msg}
	b, _ := json.Marshal(ev)
	if _, err := js.Publish(ctx, events.EventSubject(events.KindLeaseMaster, "installation"), b, jetstream.WithMsgID(ev.ID)); err != nil {
		fmt.Fprintln(out, "(the event was not published:", err.Error()+")")
	}
	fmt.Fprintln(out, msg)
}

func printLeaseMaster(out io.Writer, st leaseMasterState, asJSON bool) {
	if asJSON {
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Fprintln(out, string(b))
		return
	}
	fmt.Fprintf(out, "phase %s  current %s", st.Phase, st.Current)
	if st.Next != "" {
		fmt.Fprintf(out, "  next %s", st.Next)
	}
	if st.Previous != "" {
		fmt.Fprintf(out, "  previous %s (retires after %s)", st.Previous, st.RetireAfter.Format(time.RFC3339))
	}
	if !st.Since.IsZero() {
		fmt.Fprintf(out, "  since %s", st.Since.Format(time.RFC3339))
	}
	fmt.Fprintln(out)
	if st.Phase == leaseauth.PhaseSpreading {
		fmt.Fprintln(out, waitingFor(st))
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROXY\tPROVIDER\tPHASE\tGENERATION\tMASTERS\tWHY")
	for _, p := range st.Proxies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Provider, p.Phase, p.Generation, strings.Join(p.KeyIDs, ","), p.Why)
	}
	tw.Flush()
}
