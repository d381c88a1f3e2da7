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
	"sync"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// eventsCmd shows the events of both event streams (the lifecycle on EGRESS_EVENTS, the
// lease kinds on EGRESS_LEASE_EVENTS) in a human-readable form: the history since --since,
// merged in the order it was stored, then new events as they come.
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
	srcs, err := openEventSources(ctx, js, *kind, *proxy, *since)
	if err != nil {
		fmt.Fprintln(stderr, "egressd events:", err)
		return 1
	}
	var mu sync.Mutex // one line at a time once the sources are followed side by side
	show := func(m jetstream.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if *asJSON {
			fmt.Fprintf(stdout, "%s\n", m.Data())
			return
		}
		var ev events.Event
		if json.Unmarshal(m.Data(), &ev) == nil {
			fmt.Fprintln(stdout, formatEvent(ev))
		}
	}
	if err := mergeHistory(ctx, srcs, show); err != nil {
		if ctx.Err() != nil {
			return 0
		}
		fmt.Fprintln(stderr, "egressd events:", err)
		return 1
	}
	if !*follow || ctx.Err() != nil {
		return 0
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, src := range srcs {
		g.Go(func() error { return src.follow(gctx, show, stderr, &mu) })
	}
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		fmt.Fprintln(stderr, "egressd events:", err)
		return 1
	}
	return 0
}

// openEventSources makes one ordered consumer per event stream the filters reach, all from
// the same start (since ago; 0: only new events).
func openEventSources(ctx context.Context, js jetstream.JetStream, kind, proxy string, since time.Duration) ([]*eventSource, error) {
	var srcs []*eventSource
	start := time.Now().Add(-since) // one start for both streams
	for stream, filters := range eventFilters(kind, proxy) {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters}
		if since > 0 {
			cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
		} else {
			cfg.DeliverPolicy = jetstream.DeliverNewPolicy
		}
		cons, err := js.OrderedConsumer(ctx, stream, cfg)
		if err != nil {
			hint := ""
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				hint = " (has `egressd setup` of this version run?)"
			}
			return nil, fmt.Errorf("%s: %w%s", stream, err, hint)
		}
		srcs = append(srcs, &eventSource{stream: stream, cons: cons, caught: since <= 0})
	}
	return srcs, nil
}

// eventSource is one event stream read by `egressd events`: its ordered consumer, the
// messages fetched but not printed yet, and whether its history has been read to the end.
type eventSource struct {
	stream string
	cons   jetstream.Consumer
	buf    []jetstream.Msg
	caught bool
}

// historyBatch is how many stored events one fetch of the history asks for.
const historyBatch = 256

// fill fetches the next stored events if none are buffered. A fetch that brings nothing,
// or an event with nothing stored after it, ends the history: the rest is followed live.
func (s *eventSource) fill() error {
	if len(s.buf) > 0 || s.caught {
		return nil
	}
	batch, err := s.cons.FetchNoWait(historyBatch)
	if err != nil {
		return fmt.Errorf("%s: %w", s.stream, err)
	}
	for m := range batch.Messages() {
		s.buf = append(s.buf, m)
		if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
			s.caught = true
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		return fmt.Errorf("%s: %w", s.stream, err)
	}
	if len(s.buf) == 0 {
		s.caught = true
	}
	return nil
}

// storedAt is when the server stored m: the order both streams share.
func storedAt(m jetstream.Msg) time.Time {
	if md, err := m.Metadata(); err == nil {
		return md.Timestamp
	}
	return time.Time{}
}

// mergeHistory prints the stored events of every source in the order they were stored, a
// merge of the streams' own orders, so a --kind list spanning both reads as one history.
func mergeHistory(ctx context.Context, srcs []*eventSource, print func(jetstream.Msg)) error {
	for ctx.Err() == nil {
		var next *eventSource
		for _, s := range srcs {
			if err := s.fill(); err != nil {
				return err
			}
			if len(s.buf) > 0 && (next == nil || storedAt(s.buf[0]).Before(storedAt(next.buf[0]))) {
				next = s
			}
		}
		if next == nil {
			return nil
		}
		print(next.buf[0])
		next.buf = next.buf[1:]
	}
	return ctx.Err()
}

// follow prints new events of s until ctx ends.
func (s *eventSource) follow(ctx context.Context, print func(jetstream.Msg), stderr io.Writer, mu *sync.Mutex) error {
	for ctx.Err() == nil {
		batch, err := s.cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s: %w", s.stream, err)
		}
		for m := range batch.Messages() {
			print(m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			mu.Lock()
			fmt.Fprintf(stderr, "egressd events: %s: %v\n", s.stream, err)
			mu.Unlock()
		}
	}
	return nil
}

// eventKinds are the names --kind accepts.
var eventKinds = func() []string {
	var out []string
	for _, k := range events.Kinds {
		out = append(out, string(k))
	}
	return out
}()

// eventFilters are the subjects to read for --kind and --proxy, by the stream that stores
// them: no --kind reads every kind of both streams.
func eventFilters(kinds, proxy string) map[string][]string {
	tok := "*"
	if proxy != "" {
		tok = proxy
	}
	ks := splitList(kinds)
	if len(ks) == 0 {
		ks = eventKinds
	}
	out := map[string][]string{}
	for _, k := range ks {
		stream := events.EventStream(events.EventKind(k))
		subj := events.EventSubject(events.EventKind(k), tok)
		if !slices.Contains(out[stream], subj) {
			out[stream] = append(out[stream], subj)
		}
	}
	return out
}

// formatEvent is one line: time, kind, subject, and what happened.
func formatEvent(ev events.Event) string {
	return fmt.Sprintf("%s  %-8s %-20s %s", ev.At.Local().Format("15:04:05.000"), ev.Kind, ev.Proxy, ev.Summary())
}
