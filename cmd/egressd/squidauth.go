package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/providers/local/forwardproxy"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const squidAuthUsage = `Usage: egressd squid-auth --key-file FILE [--revocations-file LIST]

A basic-auth helper for stock Squid that checks egressd's lease tokens (auth.mode "lease",
docs/leases.md) offline, with the proxy's key from FILE (written by egressd lease-key):

  auth_param basic program /usr/bin/egressd squid-auth --key-file /etc/squid/egressd.key
  auth_param basic credentialsttl 1 second
  acl leased proxy_auth REQUIRED
  http_access allow leased

It reads "username password" lines (URL-escaped, as Squid sends them; with concurrency,
"channel-ID username password") and answers OK or ERR on each. FILE may also hold a
password line (egressd forward-proxy's auth file format). It is re-read when it changes; while
it is unusable every answer is ERR.

With --revocations-file, the tokens of the leases LIST names are refused too (a released
lease's, docs/leases.md#revocation). egressd lease-revocations --out LIST keeps it fresh; a
missing LIST revokes nothing, and one that turns unusable leaves the last one read in force.
`

// squidMaxLine bounds one request line: a lease ID and a token are a few hundred bytes.
const squidMaxLine = 64 << 10

func squidAuthCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("squid-auth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, squidAuthUsage); fs.PrintDefaults() }
	keyFile := fs.String("key-file", "", "the proxy's key `file` (required)")
	revFile := fs.String("revocations-file", "", "the lease revocation `list` to honour (egressd lease-revocations writes it)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *keyFile == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "squid-auth: --key-file is required, and nothing else")
		return 2
	}
	// Squid shows a helper's stderr in cache.log: a helper that cannot check anything says
	// so at once rather than answer ERR forever.
	if err := forwardproxy.CheckAuthFile(*keyFile); err != nil {
		fmt.Fprintln(stderr, "squid-auth:", err)
		return 1
	}
	auth := forwardproxy.NewFileAuthenticator(*keyFile, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))).
		WithRevocations(*revFile)
	if err := serveSquidAuth(stdin, stdout, auth.Check); err != nil {
		fmt.Fprintln(stderr, "squid-auth:", err)
		return 1
	}
	return 0
}

// serveSquidAuth answers Squid's basic-auth helper protocol until stdin ends. Every answer is
// flushed at once: Squid waits for it before it sends the next request on this channel. A
// line over squidMaxLine is answered ERR and skipped, never a reason to exit: Squid restarts
// a helper that exits, and stops altogether when its helpers keep exiting.
func serveSquidAuth(in io.Reader, out io.Writer, allow func(user, pass string) error) error {
	r := bufio.NewReaderSize(in, squidMaxLine)
	w := bufio.NewWriter(out)
	for {
		line, tooLong, err := readSquidLine(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var channel, answer string
		if tooLong {
			channel, answer = squidChannel(line), squidMalformed
		} else {
			channel, answer = squidAnswer(line, allow)
		}
		if _, err := w.WriteString(channel + answer + "\n"); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
}

// readSquidLine reads one line without its newline. A line longer than r's buffer comes back
// as its first squidMaxLine bytes with tooLong set, the rest of it read and dropped. A last
// line without a newline is a line; io.EOF comes only when nothing is left.
func readSquidLine(r *bufio.Reader) (line string, tooLong bool, err error) {
	b, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		line, tooLong = string(b), true
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = r.ReadSlice('\n')
		}
	} else {
		line = string(b)
	}
	if errors.Is(err, io.EOF) && (len(b) > 0 || tooLong) {
		err = nil
	}
	if err != nil {
		return "", false, err
	}
	return strings.TrimRight(line, "\r\n"), tooLong, nil
}

// squidChannel is the channel-ID prefix of a line that cannot be parsed as a whole: its first
// field if that is a number followed by at least two more fields (Squid's concurrency
// channel IDs are numbers), so that Squid can match the ERR to its request.
func squidChannel(line string) string {
	id, rest, ok := strings.Cut(line, " ")
	if !ok || id == "" || strings.Trim(id, "0123456789") != "" || !strings.Contains(rest, " ") {
		return ""
	}
	return id + " "
}

const squidMalformed = `ERR message="malformed request"`

// squidAnswer is the answer to one line, and the channel-ID prefix to give it.
//
// A refusal says why in leaseauth.Reason's words (revoked, expired, instance …), which Squid
// logs; never the credential.
func squidAnswer(line string, allow func(user, pass string) error) (channel, answer string) {
	const refused = `ERR message="lease credentials refused"`
	f := strings.Split(strings.TrimRight(line, "\r"), " ")
	if len(f) == 3 {
		channel, f = f[0]+" ", f[1:]
	}
	if len(f) != 2 {
		return channel, squidMalformed
	}
	user, err1 := url.PathUnescape(f[0])
	pass, err2 := url.PathUnescape(f[1])
	if err1 != nil || err2 != nil {
		return channel, refused
	}
	if err := allow(user, pass); err != nil {
		if r := leaseauth.Reason(err); r != "" && r != "other" {
			return channel, `ERR message="lease credentials refused: ` + r + `"`
		}
		return channel, refused
	}
	return channel, "OK"
}

const leaseKeyUsage = `Usage: egressd lease-key --proxy PROXY [--out FILE] [--nats-url URL]

Prints (or writes to FILE, mode 0600) the key lines of PROXY, for a proxy egressd does not
deliver them to: an external Squid with egressd squid-auth. One line per lease master the
installation accepts: during a master rotation (egressd lease-master), run it again after
each step and squid-auth picks the new file up at its next request. The key is derived from the lease
master, which only admin, provisioners, probers and leasers may read; treat it as a password.
`

func leaseKeyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lease-key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, leaseKeyUsage); fs.PrintDefaults() }
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server")
	out := fs.String("out", "", "write the key line to `file` (mode 0600) instead of stdout")
	proxyFlag := fs.String("proxy", "", "the proxy's `name` (required)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fmt.Fprint(stderr, leaseKeyUsage)
		return 2
	}
	proxy := *proxyFlag
	if err := schemas.ValidName(proxy); err != nil {
		fmt.Fprintln(stderr, "lease-key: proxy:", err)
		return 2
	}
	line, err := leaseKeyLine(ctx, *natsURL, proxy)
	if err == nil && *out != "" {
		err = forwardproxy.WriteLeaseKeyFile(*out, line)
	} else if err == nil {
		_, err = io.WriteString(stdout, line)
	}
	if err != nil {
		fmt.Fprintln(stderr, "lease-key:", err)
		return 1
	}
	return 0
}

func leaseKeyLine(ctx context.Context, natsURL, proxy string) (string, error) {
	nc, err := dial(natsURL, "egressd lease-key", defaultDialTimeout)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	locks, err := js.KeyValue(ctx, events.BucketLocks)
	if err != nil {
		return "", fmt.Errorf("bind bucket %s (has `egressd setup` run?): %w", events.BucketLocks, err)
	}
	ring, err := readLeaseMaster(ctx, &kvstore.Store{Locks: locks})
	if errors.Is(err, context.DeadlineExceeded) {
		return "", fmt.Errorf("%w (may this NATS user read %s.%s?)", err, events.BucketLocks, events.KeyLeaseMaster)
	}
	if err != nil {
		return "", err
	}
	// One line per master the installation accepts: during a rotation, the current one and
	// the next or previous one (decision 88), so a Squid given them accepts both.
	return leaseauth.FileLines(leaseauth.InstanceKeys(ring, proxy, "")...), nil
}
