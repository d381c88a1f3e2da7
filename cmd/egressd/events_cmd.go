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
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// eventsCmd tails EGRESS_EVENTS in a human-readable form.
func eventsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server")
	since := fs.Duration("since", time.Hour, "show events from this long ago (0: only new ones)")
	follow := fs.Bool("f", true, "keep following new events (-f=false prints history and exits)")
	kind := fs.String("kind", "", "only these kinds, comma separated ("+strings.Join(eventKinds, ", ")+")")
	proxy := fs.String("proxy", "", "only events about this proxy (or provider, for gc and provider events)")
	asJSON := fs.Bool("json", false, "print the raw JSON events, one per line")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	for _, k := range splitList(*kind) {
		if !slices.Contains(eventKinds, k) {
			fmt.Fprintf(stderr, "egressd events: --kind %q: unknown kind (%s)\n", k, strings.Join(eventKinds, ", "))
			return 2
		}
	}
	nc, err := dial(*natsURL, "egressd events", 5*time.Second)
	if err != nil {
		fmt.Fprintln(stderr, "egressd events:", err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(stderr, "egressd events:", err)
		return 1
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: eventFilters(*kind, *proxy)}
	if *since > 0 {
		start := time.Now().Add(-*since)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	} else {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "egressd events:", err)
		return 1
	}
	for {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			fmt.Fprintln(stderr, "egressd events:", err)
			return 1
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if *asJSON {
				fmt.Fprintf(stdout, "%s\n", m.Data())
				continue
			}
			var ev events.Event
			if json.Unmarshal(m.Data(), &ev) != nil {
				continue
			}
			fmt.Fprintln(stdout, formatEvent(ev))
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			fmt.Fprintln(stderr, "egressd events:", err)
		}
		if ctx.Err() != nil || (n == 0 && !*follow) {
			return 0
		}
	}
}

// eventKinds are the names --kind accepts.
var eventKinds = func() []string {
	var out []string
	for _, k := range events.Kinds {
		out = append(out, string(k))
	}
	return out
}()

func eventFilters(kinds, proxy string) []string {
	tok := "*"
	if proxy != "" {
		tok = proxy
	}
	var out []string
	for _, k := range splitList(kinds) {
		out = append(out, events.EventSubject(events.EventKind(k), tok))
	}
	if len(out) == 0 {
		out = []string{events.EventSubject("*", tok)}
	}
	return out
}

// formatEvent is one line: time, kind, subject, and what happened.
func formatEvent(ev events.Event) string {
	return fmt.Sprintf("%s  %-8s %-20s %s", ev.At.Local().Format("15:04:05.000"), ev.Kind, ev.Proxy, ev.Summary())
}
