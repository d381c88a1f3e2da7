package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// proxyRow is one line of `egressd status` (and one object of -o json).
type proxyRow struct {
	Name     string              `json:"name"`
	Mode     string              `json:"mode"`
	Provider string              `json:"provider"`
	Phase    events.Phase        `json:"phase"`
	Address  string              `json:"address"`
	Healthy  string              `json:"healthy"` // True, False, or - while unknown
	Leases   int                 `json:"leases"`
	MaxLease int                 `json:"maxLeases"`
	Reason   string              `json:"reason"`
	Message  string              `json:"message,omitempty"`
	Age      string              `json:"age"`
	Status   *events.ProxyStatus `json:"status,omitempty"`
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	what := "proxies"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		what, args = args[0], args[1:]
	}
	if what != "proxies" && what != "providers" {
		fmt.Fprintf(stderr, "egressd status: unknown view %q (proxies or providers)\n", what)
		return 2
	}
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server")
	output := fs.String("o", "table", "output: table or json")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "egressd status: -o %q: use table or json\n", *output)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if what == "providers" {
		targets, err := loadTargets(ctx, *natsURL)
		if err != nil {
			fmt.Fprintln(stderr, "egressd status:", err)
			return 1
		}
		if *output == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if targets == nil {
				targets = []events.TargetHealth{}
			}
			_ = enc.Encode(targets)
			return 0
		}
		printTargets(stdout, targets)
		return 0
	}
	rows, err := loadRows(ctx, *natsURL)
	if err != nil {
		fmt.Fprintln(stderr, "egressd status:", err)
		return 1
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []proxyRow{}
		}
		_ = enc.Encode(rows)
		return 0
	}
	printTable(stdout, rows)
	return 0
}

func loadRows(ctx context.Context, url string) ([]proxyRow, error) {
	nc, err := dial(url, "egressd status", 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	// Specs hold passwords and user-data, so a viewer may not read them (deploy/nats): rows
	// then come from status alone, without maxLeases.
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	specs, _ := readAll(sctx, js, events.BucketProxies)
	scancel()
	statuses, err := readAll(ctx, js, events.BucketStatus)
	if err != nil {
		return nil, err
	}
	health, err := readAll(ctx, js, events.BucketHealth)
	if err != nil {
		return nil, err
	}
	leases, err := readAll(ctx, js, events.BucketLeases)
	if err != nil {
		return nil, err
	}
	active := map[string]int{}
	for key := range leases {
		if proxy, _, ok := strings.Cut(key, "."); ok {
			active[proxy]++
		}
	}
	now := time.Now()
	var rows []proxyRow
	for name, e := range specs {
		r := proxyRow{Name: name, Phase: events.PhasePending, Mode: "?", Healthy: "-", Age: events.Age(now, e.Created())}
		if s, err := schemas.ParseProxySpec(e.Value()); err == nil {
			r.Mode, r.Provider, r.MaxLease = s.Mode, s.Provider, *s.MaxLeases
		}
		rows = append(rows, r)
	}
	for name, e := range statuses {
		var st events.ProxyStatus
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			continue
		}
		i := slices.IndexFunc(rows, func(r proxyRow) bool { return r.Name == name })
		if i < 0 {
			rows = append(rows, proxyRow{Name: name, Mode: "?", Healthy: "-"})
			i = len(rows) - 1
		}
		r := &rows[i]
		r.Phase, r.Reason, r.Message, r.Status = st.Phase, st.Reason, st.Message, &st
		if st.Mode != "" {
			r.Mode = st.Mode
		}
		if st.Provider != "" {
			r.Provider = st.Provider
		}
		if st.IP != "" {
			r.Address = net.JoinHostPort(st.IP, strconv.Itoa(st.Port))
		}
		if !st.CreatedAt.IsZero() {
			r.Age = events.Age(now, st.CreatedAt)
		}
		var h events.ProxyHealth
		if e, ok := health[name]; ok && json.Unmarshal(e.Value(), &h) == nil && h.Address == r.Address && h.Judged() {
			r.Healthy = "False"
			if h.Healthy {
				r.Healthy = "True"
			}
		}
	}
	for i := range rows {
		rows[i].Leases = active[rows[i].Name]
	}
	slices.SortFunc(rows, func(a, b proxyRow) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return rows, nil
}

// readAll returns the latest entry of every key of a bucket; a bucket that does not exist
// yet reads as empty.
func readAll(ctx context.Context, js jetstream.JetStream, bucket string) (map[string]jetstream.KeyValueEntry, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bucket, err)
	}
	return kvstore.Latest(ctx, kv)
}

func printTable(w io.Writer, rows []proxyRow) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "No proxies. Declare one with: nats kv put proxies p1 '{\"provider\":\"local\"}'")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tPROVIDER\tPHASE\tADDRESS\tHEALTHY\tLEASES\tREASON\tAGE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", r.Name, r.Mode, dash(r.Provider), r.Phase, dash(r.Address),
			r.Healthy, r.Leases, r.MaxLease, dash(r.Reason), r.Age)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Phase == events.PhaseInvalid || r.Phase == events.PhaseFailed {
			fmt.Fprintf(w, "%s: %s\n", r.Name, r.Message)
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
