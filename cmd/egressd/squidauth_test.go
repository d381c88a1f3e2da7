package main

import (
	"bytes"
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
	allow := func(user, pass string) bool { return user == "p1.0.abc" && pass == "v1.1.x y" }
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
	allow := func(user, pass string) bool { return user == "u" && pass == "p" }
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
