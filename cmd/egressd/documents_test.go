package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/schemas"
)

// FuzzCheckDocument: whatever a user hands `egressd validate` or `apply`, the answer is a list
// of problems that each name a field, or none for exactly the documents the reconciler or
// the pool controller would act on given the catalog; never a panic.
func FuzzCheckDocument(f *testing.F) {
	for _, seed := range []string{
		`{"provider":"local"}`, `{"provider":"nope","port":"x"}`, `{"mode":"external","endpoint":{"host":"h"}}`,
		`{"provider":"kvm","placement":{"zone":"h9"}}`, `{"provider":null,"prot":1}`, `{"provider":`,
		`{"template":{"provider":"local"},"replicas":2}`, `{"template":{"provider":"nope"},"replicas":1,"placements":[{"provider":"kvm","zone":"x"}]}`,
		`{"template":{"provider":"nope","port":70000},"replcias":3}`, `[]`, `null`, ``,
	} {
		f.Add("proxy", []byte(seed))
		f.Add("pool", []byte(seed))
	}
	cat := schemas.Catalog{"local": {Hosts: []string{"local"}}, "kvm": {Hosts: []string{"h1", "h2"}}, "cfg": {HostsUnknown: true}}
	f.Fuzz(func(t *testing.T, kind string, data []byte) {
		k, ok := docKinds[kind]
		if !ok {
			return
		}
		errs := checkDocument(k, data, cat)
		for _, e := range errs {
			var fe *schemas.FieldError
			if !errors.As(e, &fe) { // Field "" is a key that is the empty string
				t.Fatalf("problem %q names no field", e)
			}
		}
		doc, err := k.parse(data)
		valid := err == nil && doc.CheckCatalog(cat) == nil
		if valid != (len(errs) == 0) {
			t.Fatalf("valid %v, but %d problems: %v", valid, len(errs), errs)
		}
	})
}

func TestPositionalsTakeFlagsAnywhere(t *testing.T) {
	for _, args := range [][]string{
		{"pool", "web", "-", "--nats-url", "u"},
		{"--nats-url", "u", "pool", "web", "-"},
		{"pool", "--nats-url=u", "web", "-"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		u := fs.String("nats-url", "", "")
		pos, _, ok := positionals(fs, args)
		if !ok || !slices.Equal(pos, []string{"pool", "web", "-"}) || *u != "u" {
			t.Errorf("%q: %q %q %v", args, pos, *u, ok)
		}
	}
}

// The usage text and the dispatch read one table: every command is listed, and every line of
// the usage text is a command that dispatch knows.
func TestUsageListsEveryCommand(t *testing.T) {
	text := usage()
	for _, want := range []string{"egressd lease token", "egressd validate proxy|pool FILE", "egressd apply proxy|pool NAME FILE",
		"egressd delete proxy|pool NAME", "egressd status [-o json] [--check]", "egressd status pools", "egressd squid-auth"} {
		if !strings.Contains(text, want) {
			t.Errorf("usage lacks %q:\n%s", want, text)
		}
	}
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(line, "  egressd ")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		if !slices.ContainsFunc(commands, func(c command) bool { return c.name == strings.TrimSpace(name) }) {
			t.Errorf("usage lists %q, which dispatch does not know", name)
		}
	}
	// status -h lists every view, from the same table.
	for _, view := range statusViews[1:] {
		if !strings.Contains(commandUsage("status"), "egressd status "+view) {
			t.Errorf("status -h lacks the view %s", view)
		}
	}
	// docs/cli.md shows the same list.
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(text) {
		if l, ok := strings.CutPrefix(line, "  "); ok && !strings.Contains(string(doc), l) {
			t.Errorf("docs/cli.md lacks the usage line %q", strings.TrimSpace(l))
		}
	}
	var out, errOut bytes.Buffer
	if code := dispatch([]string{"nope"}, stdio{out: &out, errOut: &errOut}); code != 2 || !strings.Contains(errOut.String(), `unknown command "nope"`) {
		t.Errorf("unknown command: %d %q", code, errOut.String())
	}
	if code := dispatch([]string{"--help"}, stdio{out: &out, errOut: &errOut}); code != 0 || out.String() != text {
		t.Errorf("--help: %d", code)
	}
}
