package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
	"github.com/egressd/egressd/readside/fleet"
	"github.com/egressd/egressd/readside/fleet/fleettest"
	"github.com/nats-io/nats.go"
)

// mixedFleet is an embedded server holding fleettest.Mixed; it returns the server's URL.
func mixedFleet(t *testing.T) (string, *kvstore.Store, *nats.Conn, fleettest.Want) {
	t.Helper()
	srv, nc, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), store, nc, fleettest.Mixed(t, store, time.Now())
}

func runStatus(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCommand(t, statusCmd, args...)
}

// runCommand runs one of the commands in this process, with its output captured.
func runCommand(t *testing.T, cmd func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cmd(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// tableNames is the first column of a status table's rows.
func tableNames(table string) string {
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasSuffix(f[0], ":") {
			names = append(names, f[0])
		}
	}
	return strings.Join(names, " ")
}

// spaced is text with each run of spaces made one, and a newline first.
func spaced(s string) string { return "\n" + regexp.MustCompile(` +`).ReplaceAllString(s, " ") }

func TestStatusCommandFilters(t *testing.T) {
	url, _, _, _ := mixedFleet(t)
	for _, c := range []struct {
		name  string
		args  []string
		names string
	}{
		{"every proxy", nil, "bad broken gone moved new office pending ready-de ready-fr ready-stale sick slow swap"},
		{"one phase", []string{"--phase", "Ready"}, "office ready-de ready-fr ready-stale slow"},
		{"phases repeated and comma-separated", []string{"--phase", "running,Unhealthy", "--phase=Deleting"}, "gone moved new sick"},
		{"provider", []string{"--provider", "external"}, "office"},
		{"selector", []string{"--selector", "geo=de"}, "ready-de ready-stale"},
		{"selectors all match", []string{"--selector", "geo=de", "--phase", "Ready", "--provider", "local"}, "ready-de ready-stale"},
		{"comma-separated selector", []string{"--selector", "geo=de,tier=x"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runStatus(t, append([]string{"--nats-url", url}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if c.names == "" {
				if !strings.Contains(out, "No proxies match (13 in the fleet).") {
					t.Errorf("output %q", out)
				}
				return
			}
			if got := tableNames(out); got != c.names {
				t.Errorf("rows %q, want %q\n%s", got, c.names, out)
			}
		})
	}
}

func TestStatusCommandTable(t *testing.T) {
	url, _, _, _ := mixedFleet(t)
	code, out, errs := runStatus(t, "--nats-url", url)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"NAME MODE PROVIDER PHASE ADDRESS HEALTHY ANONYMITY LEASES REASON AGE",
		"ready-de managed local Ready 127.0.0.2:3128 True elite 2/2 - 1h",
		"ready-fr managed local Ready 127.0.0.3:3128 True anonymous 0/1 EgressMismatch 1h",
		"office external external Ready 127.0.0.50:8080 - - 1/3 ProbeOverdue 1h",
		"sick managed local Unhealthy 127.0.0.5:3128 False transparent 0/1 ProbeFailing 1h",
		"gone managed local Deleting - - - 1/- ProxyDeleted -",
		"bad: port: must be an integer",
		"ready-fr: traffic leaves from 127.0.0.1, expected 192.0.2.3",
	} {
		if !strings.Contains(spaced(out), "\n"+want+"\n") {
			t.Errorf("table lacks\n%s\nin\n%s", want, out)
		}
	}
	if strings.Contains(out, "SENTINEL") {
		t.Error("the table shows a password from a spec")
	}
	code, out, _ = runStatus(t, "--nats-url", url, "-o", "json", "--phase", "Ready")
	var rows []fleet.Row
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, out)
	}
	if len(rows) != 5 || rows[0].Name != "office" || !rows[0].ProbeOverdue || rows[0].Status == nil || rows[0].Status.IP != "127.0.0.50" {
		t.Errorf("json rows: %+v", rows)
	}
	if strings.Contains(out, "SENTINEL") {
		t.Error("the JSON shows a password from a spec")
	}
}

func TestStatusCommandBadInput(t *testing.T) {
	url, _, _, _ := mixedFleet(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--phase", "Redy"}, `egressd status: --phase "Redy": not a phase; one of Pending, Invalid,`},
		{[]string{"--selector", "geo"}, `egressd status: --selector "geo": want key=value with a key`},
		{[]string{"--selector", "=de"}, `egressd status: --selector "=de": want key=value with a key`},
		{[]string{"--selector", "geo=de,geo=fr"}, `egressd status: --selector "geo=fr": key "geo" is already given (as "de")`},
		{[]string{"extra"}, `egressd status: unexpected argument "extra"`},
		{[]string{"providers", "--phase", "Ready"}, "egressd status providers: --phase, --provider, --selector and --pool select proxies"},
		{[]string{"-o", "yaml"}, `egressd status: -o "yaml": use table or json`},
	} {
		args := append([]string{"--nats-url", url}, c.args...)
		if c.args[0] == "providers" {
			args = append([]string{"providers", "--nats-url", url}, c.args[1:]...)
		}
		code, out, errs := runStatus(t, args...)
		if code != 2 || out != "" || !strings.HasPrefix(errs, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errs, c.want)
		}
	}
}

// The reconciler's ExternalEndpoint reason only restates the mode: an overdue external proxy
// still shows ProbeOverdue.
func TestOverdueReplacesTheReconcilersExternalReason(t *testing.T) {
	url, store, _, _ := mixedFleet(t)
	now := time.Now()
	fleettest.Put(t, store.Proxies, "ext-2", []byte(`{"mode":"external","endpoint":{"host":"127.0.0.51"}}`))
	fleettest.Put(t, store.Status, "ext-2", events.ProxyStatus{V: 1, Phase: events.PhaseReady, Mode: "external", IP: "127.0.0.51", Port: 3128,
		Reason: events.ReasonExternalEndpoint, AddressAt: now.Add(-time.Hour)})
	_, out, _ := runStatus(t, "--nats-url", url, "-o", "json", "--provider", "external")
	var rows []fleet.Row
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Name == "ext-2" && r.Reason == events.ReasonProbeOverdue {
			return
		}
	}
	t.Errorf("ext-2 does not show ProbeOverdue: %+v", rows)
}

// `egressd status probers` lists the live probers from egress_probers, with their shares.
func TestStatusProbers(t *testing.T) {
	url, store, _, _ := mixedFleet(t)
	if code, out, _ := runStatus(t, "probers", "--nats-url", url); code != 0 || !strings.Contains(out, "No probers running") {
		t.Fatalf("no probers: code %d, %q", code, out)
	}
	rec := events.ProberMember{V: 1, ID: "0a1b2c3d4e5f6a7b", Worker: "host-1", Filters: []string{"local"}, Concurrency: 256,
		StartedAt: time.Now().Add(-time.Minute), Owned: 4000, Backlog: 12, LagSeconds: 2.5}
	b, _ := json.Marshal(rec)
	if _, err := store.Probers.Put(context.Background(), rec.ID, b); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runStatus(t, "probers", "--nats-url", url)
	if code != 0 || !strings.Contains(spaced(out), "\nhost-1 0a1b2c3d4e5f6a7b local 4000 12 2.5s 256 1m") {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, _ = runStatus(t, "probers", "-o", "json", "--nats-url", url)
	var got []events.ProberMember
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 1 || got[0].Owned != 4000 {
		t.Fatalf("json: code %d, %v, %s", code, err, out)
	}
	if code, _, errs := runStatus(t, "probers", "--phase", "Ready", "--nats-url", url); code != 2 || !strings.Contains(errs, "do not apply") {
		t.Fatalf("a proxy filter on probers: code %d, %q", code, errs)
	}
}
