package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every command of the table dispatches (its -h is its own, not dispatch's "unknown
// command"), and every lease subcommand the usage names is one lease accepts, while one it
// does not name is refused: the table, the usage and the dispatch cannot drift apart.
func TestEveryTableCommandDispatches(t *testing.T) {
	for _, c := range commands {
		var out, errOut bytes.Buffer
		code := dispatch([]string{c.name, "-h"}, stdio{in: strings.NewReader(""), out: &out, errOut: &errOut})
		if strings.Contains(errOut.String(), "unknown command") || (code != 0 && code != 2) {
			t.Errorf("%s -h: exit %d, %q", c.name, code, errOut.String())
		}
		if out.Len()+errOut.Len() == 0 {
			t.Errorf("%s -h: says nothing", c.name)
		}
	}
	text := usage()
	for _, sub := range append([]string{"token"}, leaseSubcommands...) {
		if !strings.Contains(text, "egressd lease ") || !strings.Contains(text, sub) {
			t.Errorf("usage lacks lease %s:\n%s", sub, text)
		}
	}
	for _, sub := range leaseSubcommands {
		var out, errOut bytes.Buffer
		if code := dispatch([]string{"lease", sub, "-h"}, stdio{out: &out, errOut: &errOut}); code != 0 || strings.Contains(errOut.String(), "unknown subcommand") {
			t.Errorf("lease %s -h: exit %d, %q", sub, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := dispatch([]string{"lease", "nope"}, stdio{out: &out, errOut: &errOut}); code != 2 || !strings.Contains(errOut.String(), `unknown subcommand "nope"`) {
		t.Errorf("lease nope: exit %d, %q", code, errOut.String())
	}
	if !strings.Contains(text, "egressd lease "+strings.Join(leaseSubcommands, "|")+" [flags]") {
		t.Errorf("usage's lease line is not made from leaseSubcommands:\n%s", text)
	}
}
