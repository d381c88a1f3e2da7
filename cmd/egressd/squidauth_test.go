package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/leaseauth"
)

// Squid's basic-auth helper protocol: one answer per line, in order, with the channel-ID
// echoed when Squid sends one, and URL-escaped fields decoded.
func TestSquidAuthProtocol(t *testing.T) {
	allow := func(user, pass string) error { return refuseUnless(user == "p1.0.abc" && pass == "v1.1.x y") }
	in := strings.Join([]string{
		"p1.0.abc v1.1.x%20y",   // OK
		"p1.0.abc wrong",        // ERR
		"7 p1.0.abc v1.1.x%20y", // concurrency: channel 7, OK
		"8 p1.0.abc nope",       // channel 8, ERR
		"just-one-field",        // malformed
		"a b c d",               // malformed
		"p1.0.abc %zz",          // bad escape
		"p1.0.abc v1.1.x%20y\r", // CRLF
	}, "\n") + "\n"
	var out bytes.Buffer
	if err := serveSquidAuth(strings.NewReader(in), &out, allow); err != nil {
		t.Fatal(err)
	}
	want := []string{"OK", `ERR message="lease credentials refused"`, "7 OK", `8 ERR message="lease credentials refused"`,
		`ERR message="malformed request"`, `ERR message="malformed request"`, `ERR message="lease credentials refused"`, "OK"}
	if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("answers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The command itself, on a key file: a lease token passes, a forged one does not, and a
// missing key file stops it at once.
func TestSquidAuthCommand(t *testing.T) {
	key := leaseauth.NewMaster().ProxyKey("sq")
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte(key.FileLine()), 0o600); err != nil {
		t.Fatal(err)
	}
	user, pass := key.Sign("sq.0.0123456789abcdef", time.Now().Add(time.Minute))
	var out, errs bytes.Buffer
	forged := pass[:len(pass)-1] + map[bool]string{true: "B", false: "A"}[strings.HasSuffix(pass, "A")]
	in := strings.NewReader(user + " " + pass + "\n" + user + " " + forged + "\n")
	if code := squidAuthCmd([]string{"--key-file", file}, in, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "OK\nERR") || strings.Count(got, "\n") != 2 {
		t.Fatalf("answers %q", got)
	}
	if strings.Contains(errs.String(), pass) {
		t.Fatal("stderr holds the token")
	}
	if code := squidAuthCmd([]string{"--key-file", filepath.Join(t.TempDir(), "missing")}, strings.NewReader(""), &out, &errs); code != 1 {
		t.Fatalf("a missing key file: exit %d, want 1", code)
	}
	if code := squidAuthCmd(nil, strings.NewReader(""), &out, &errs); code != 2 {
		t.Fatalf("no --key-file: exit %d, want 2", code)
	}
}

// A line longer than the helper reads is answered ERR like any other bad line, and the helper
// goes on: a helper that exits is restarted by Squid, and one that keeps exiting makes Squid
// stop ("helpers are crashing too rapidly").
func TestSquidAuthOverlongLine(t *testing.T) {
	allow := func(user, pass string) error { return refuseUnless(user == "u" && pass == "p") }
	long := strings.Repeat("x", squidMaxLine+10)
	in := strings.Join([]string{
		"u " + long,     // too long: ERR, no channel to echo
		"9 u " + long,   // too long, with a channel ID: ERR on channel 9
		"u p",           // then the helper still answers
		long,            // one field, too long
		"10 u p",        // and still in step
		"u " + long[:8], // a last line without its newline: answered too
	}, "\n")
	var out bytes.Buffer
	if err := serveSquidAuth(strings.NewReader(in), &out, allow); err != nil {
		t.Fatal(err)
	}
	want := []string{`ERR message="malformed request"`, `9 ERR message="malformed request"`, "OK",
		`ERR message="malformed request"`, "10 OK", `ERR message="lease credentials refused"`}
	if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("answers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func refuseUnless(ok bool) error {
	if ok {
		return nil
	}
	return errors.New("refused")
}

// With --revocations-file, a token passes until its lease is on the list, and is then
// refused with the reason, from the next question on: the helper keeps running and re-reads
// the list. A token of another instance of the proxy says so too.
func TestSquidAuthRevocations(t *testing.T) {
	dir := t.TempDir()
	keyFile, revFile := filepath.Join(dir, "key"), filepath.Join(dir, "revoked")
	m := leaseauth.NewMaster()
	key := m.InstanceKey("sq", "g2")
	if err := os.WriteFile(keyFile, []byte(key.FileLine()), 0o600); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Minute)
	user, pass := key.Sign("sq.0.0123456789abcdef", exp)
	_, old := m.InstanceKey("sq", "g1").Sign("sq.1.0123456789abcdef", exp)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	var errs bytes.Buffer
	go func() {
		done <- squidAuthCmd([]string{"--key-file", keyFile, "--revocations-file", revFile}, inR, outW, &errs)
		outW.Close()
	}()
	answers := bufio.NewReader(outR)
	ask := func(user, pass string) string {
		t.Helper()
		if _, err := io.WriteString(inW, user+" "+pass+"\n"); err != nil {
			t.Fatal(err)
		}
		a, err := answers.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(a)
	}
	if a := ask(user, pass); a != "OK" {
		t.Fatalf("before revocation: %s", a)
	}
	if a := ask("sq.1.0123456789abcdef", old); a != `ERR message="lease credentials refused: instance"` {
		t.Fatalf("another instance's token: %s", a)
	}
	var list leaseauth.Revocations
	list.Add(user, exp.Add(leaseauth.Skew))
	if err := os.WriteFile(revFile, list.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	if a := ask(user, pass); a != `ERR message="lease credentials refused: revoked"` {
		t.Fatalf("after revocation: %s", a)
	}
	inW.Close()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if strings.Contains(errs.String(), pass) {
		t.Fatal("stderr holds the token")
	}
}

// During a master rotation the key file holds a key line per master (egressd lease-key prints
// them): squid-auth passes the tokens of both, and once the file holds the new master's only,
// refuses the old one's as of an unknown master.
func TestSquidAuthDuringRotation(t *testing.T) {
	old, next := leaseauth.NewMaster(), leaseauth.NewMaster()
	file := filepath.Join(t.TempDir(), "key")
	exp := time.Now().Add(time.Minute)
	u1, p1 := old.ProxyKey("sq").Sign("sq.0.0123456789abcdef", exp)
	u2, p2 := next.ProxyKey("sq").Sign("sq.1.0123456789abcdef", exp)
	in := u1 + " " + p1 + "\n" + u2 + " " + p2 + "\n"
	for _, c := range []struct {
		name string
		keys []leaseauth.Key
		want string
	}{
		{"spreading", []leaseauth.Key{old.ProxyKey("sq"), next.ProxyKey("sq")}, "OK\nOK\n"},
		{"retired", []leaseauth.Key{next.ProxyKey("sq")}, "ERR message=\"lease credentials refused: key\"\nOK\n"},
	} {
		if err := os.WriteFile(file, []byte(leaseauth.FileLines(c.keys...)), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errs bytes.Buffer
		if code := squidAuthCmd([]string{"--key-file", file}, strings.NewReader(in), &out, &errs); code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, code, errs.String())
		}
		if out.String() != c.want {
			t.Errorf("%s: answers %q, want %q", c.name, out.String(), c.want)
		}
	}
}
