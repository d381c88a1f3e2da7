package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/egressd/egressd/cmd/egressd/internal/config"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// docKind is a document users write: its bucket, its key's rule and its checks, which are
// the ones the reconciler and the pool controller apply (schemas), so that a document that
// passes here is one they act on.
type docKind struct {
	bucket    string
	checkName func(string) error
	parse     func(data []byte) (checker, error)
	// lenient reads what a catalog check needs from a document that does not parse, so that
	// an unknown provider is reported beside the other problems.
	lenient func(data []byte) checker
}

// checker is a parsed document's check against the providers.
type checker interface{ CheckCatalog(schemas.Catalog) error }

var docKinds = map[string]docKind{
	"proxy": {bucket: events.BucketProxies, checkName: schemas.ValidName,
		parse: func(b []byte) (checker, error) { s, err := schemas.ParseProxySpec(b); return s, err },
		lenient: func(b []byte) checker {
			var s schemas.ProxySpec
			_ = json.Unmarshal(b, &s) // past a wrong type, what it can; nothing from broken JSON
			if s.Provider == "" {
				return nil
			}
			return s
		}},
	"pool": {bucket: events.BucketPools, checkName: schemas.ValidPoolName,
		parse: func(b []byte) (checker, error) { s, err := schemas.ParsePoolSpec(b); return s, err },
		lenient: func(b []byte) checker {
			var s schemas.PoolSpec
			_ = json.Unmarshal(b, &s)
			if s.Template.Provider == "" {
				return nil
			}
			return s
		}},
}

// maxDocument bounds a document read: a KV value is one NATS message (1 MiB by default).
const maxDocument = 1 << 20

// checkDocument returns every problem of a document: the parser's, and what the reconciler
// would refuse given cat. A catalog problem on a field the parser already named is left out.
func checkDocument(k docKind, data []byte, cat schemas.Catalog) []error {
	doc, err := k.parse(data)
	errs := leaves(err)
	if err != nil {
		doc = k.lenient(data)
	}
	if doc == nil {
		return errs
	}
	named := map[string]bool{}
	for _, e := range errs {
		var fe *schemas.FieldError
		if errors.As(e, &fe) {
			named[fe.Field] = true
		}
	}
	for _, e := range leaves(doc.CheckCatalog(cat)) {
		var fe *schemas.FieldError
		if errors.As(e, &fe) && named[fe.Field] {
			continue
		}
		errs = append(errs, e)
	}
	return errs
}

// leaves splits joined errors, one per problem.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

// readDocument reads FILE, or standard input for "-".
func readDocument(path string, stdin io.Reader) ([]byte, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxDocument+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", docName(path), err)
	}
	if len(b) > maxDocument {
		return nil, fmt.Errorf("%s: larger than %d bytes, more than a KV value holds", docName(path), maxDocument)
	}
	return b, nil
}

func docName(path string) string {
	if path == "-" {
		return "standard input"
	}
	return path
}

// configCatalog is the providers a config declares, by name: what `egressd run` with that
// config would publish. Their hosts are known only once a provisioner publishes them, so
// zones are not checked.
func configCatalog(path string) (schemas.Catalog, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	cat := schemas.Catalog{}
	for _, p := range cfg.Providers {
		cat[p.Name] = schemas.CatalogEntry{HostsUnknown: true}
	}
	return cat, nil
}

// reportProblems prints a document's problems, one per line, each naming its field.
func reportProblems(w io.Writer, cmd, kind, path string, errs []error) {
	noun := "problems"
	if len(errs) == 1 {
		noun = "problem"
	}
	fmt.Fprintf(w, "egressd %s: %s is not a valid %s document (%d %s):\n", cmd, docName(path), kind, len(errs), noun)
	for _, e := range errs {
		fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(e.Error(), "\n", "; "))
	}
}

// positionals parses fs's flags wherever they are among args (the flag package stops at the
// first argument that is not a flag) and returns the other arguments in order.
func positionals(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return nil, code, false
		}
		if fs.NArg() == 0 {
			return pos, 0, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// kindOf checks the first argument, the document's kind.
func kindOf(cmd string, pos []string, want int, stderr io.Writer, synopsis string) (docKind, string, bool) {
	if len(pos) != want {
		fmt.Fprintf(stderr, "usage: egressd %s %s\n", cmd, synopsis)
		return docKind{}, "", false
	}
	k, ok := docKinds[pos[0]]
	if !ok {
		fmt.Fprintf(stderr, "egressd %s: unknown kind %q (proxy or pool)\n", cmd, pos[0])
		return docKind{}, "", false
	}
	return k, pos[0], true
}

// docCommand is the shape validate, apply and delete share: a flag set whose usage starts
// with the synopsis, and positionals of which the first is a kind (proxy or pool).
type docCommand struct {
	name, synopsis string
	fs             *flag.FlagSet
}

func newDocCommand(name, synopsis, about string, sio stdio) *docCommand {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(sio.errOut)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: egressd %s %s\n\n%s\n\n", name, synopsis, about)
		fs.PrintDefaults()
	}
	return &docCommand{name: name, synopsis: synopsis, fs: fs}
}

// parse reads the flags and want positionals, the first a kind; when !ok, code is the exit
// code and what is wrong has been said.
func (c *docCommand) parse(args []string, want int, stderr io.Writer) (k docKind, kind string, pos []string, code int, ok bool) {
	if pos, code, ok = positionals(c.fs, args); !ok {
		return docKind{}, "", nil, code, false
	}
	if k, kind, ok = kindOf(c.name, pos, want, stderr, c.synopsis); !ok {
		return docKind{}, "", nil, 2, false
	}
	return k, kind, pos, 0, true
}

func validateCmd(_ context.Context, args []string, sio stdio) int {
	c := newDocCommand("validate", "proxy|pool FILE [--config F]",
		"Checks a document as the reconciler and the pool controller would, without writing it (FILE - reads standard input).\nExits 0 if it is valid, 1 with every problem, each naming its field.", sio)
	configPath := c.fs.String("config", "", "YAML config declaring the providers a document may name (default: one local provider named local, as egressd run)")
	k, kind, pos, code, ok := c.parse(args, 2, sio.errOut)
	if !ok {
		return code
	}
	cat, err := configCatalog(*configPath)
	if err != nil {
		fmt.Fprintln(sio.errOut, "egressd validate:", err)
		return 2
	}
	data, err := readDocument(pos[1], sio.in)
	if err != nil {
		fmt.Fprintln(sio.errOut, "egressd validate:", err)
		return 2
	}
	if errs := checkDocument(k, data, cat); len(errs) > 0 {
		reportProblems(sio.errOut, "validate", kind, pos[1], errs)
		return 1
	}
	fmt.Fprintf(sio.out, "%s: a valid %s document (providers: %s)\n", docName(pos[1]), kind, cat.Names())
	return 0
}

// openBucket connects a command that writes a bucket (apply, delete) and opens the bucket;
// the connection's reads and writes fail fast when the server denies them (denied.go).
func openBucket(ctx context.Context, natsURL, cmd, bucket string) (*reader, jetstream.KeyValue, error) {
	r, err := dialReader(natsURL, "egressd "+cmd)
	if err != nil {
		return nil, nil, err
	}
	kv, err := r.open(ctx, bucket)
	if err == nil && kv == nil {
		err = fmt.Errorf("bucket %s does not exist: is egressd set up (egressd run, or egressd setup)?", bucket)
	}
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, kv, nil
}

// liveCatalog is provider_catalog as the reconciler reads it, hosts and all.
func liveCatalog(ctx context.Context, r *reader) (schemas.Catalog, error) {
	kv, err := r.open(ctx, events.BucketCatalog)
	if err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, errors.New("no provider_catalog bucket")
	}
	records, err := kvstore.Latest(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", events.BucketCatalog, err)
	}
	cat := schemas.Catalog{}
	for name, e := range records {
		var rec events.CatalogRecord
		if json.Unmarshal(e.Value(), &rec) != nil {
			continue // as the reconciler: an unreadable record is no provider
		}
		var entry schemas.CatalogEntry
		for _, h := range rec.Hosts {
			entry.Hosts = append(entry.Hosts, h.Name)
		}
		cat[name] = entry
	}
	return cat, nil
}

// commandBudget bounds a whole apply or delete.
const commandBudget = 15 * time.Second

func applyCmd(ctx context.Context, args []string, sio stdio) int {
	c := newDocCommand("apply", "proxy|pool NAME FILE [--nats-url URL]",
		"Checks a document as egressd validate does, against the providers egressd knows now\n(provider_catalog: names, and hosts for placement.zone), then writes it under NAME in the\nproxies or pools bucket and prints its revision. An invalid document writes nothing (exit 1).\nFILE - reads standard input.", sio)
	natsURL := c.fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server (credentials: "+envUser+", "+envPassword+")")
	configPath := c.fs.String("config", "", "the providers to check against when provider_catalog cannot be read (default: one local provider named local)")
	k, kind, pos, code, ok := c.parse(args, 3, sio.errOut)
	if !ok {
		return code
	}
	name, path := pos[1], pos[2]
	data, err := readDocument(path, sio.in)
	if err != nil {
		fmt.Fprintln(sio.errOut, "egressd apply:", err)
		return 2
	}
	var errs []error
	if err := k.checkName(name); err != nil {
		errs = append(errs, &schemas.FieldError{Field: "(name)", Problem: err.Error()})
	}
	ctx, cancel := context.WithTimeout(ctx, commandBudget)
	defer cancel()
	r, kv, err := openBucket(ctx, *natsURL, "apply", k.bucket)
	if err != nil {
		fmt.Fprintln(sio.errOut, "egressd apply:", err)
		return 1
	}
	defer r.Close()
	cat, catErr := liveCatalog(ctx, r)
	if catErr != nil {
		if cat, err = configCatalog(*configPath); err != nil {
			fmt.Fprintln(sio.errOut, "egressd apply:", err)
			return 2
		}
		fmt.Fprintf(sio.errOut, "egressd apply: provider_catalog could not be read (%v); checking against the config's providers: %s\n", catErr, cat.Names())
	}
	if errs = append(errs, checkDocument(k, data, cat)...); len(errs) > 0 {
		reportProblems(sio.errOut, "apply", kind, path, errs)
		fmt.Fprintf(sio.errOut, "nothing written to %s\n", k.bucket)
		return 1
	}
	gctx, release := r.denied.guard(ctx, k.bucket)
	rev, err := kv.Put(gctx, name, data)
	err = denied(gctx, err)
	release()
	if err != nil {
		fmt.Fprintf(sio.errOut, "egressd apply: write %s %s: %v\n", kind, name, err)
		return 1
	}
	fmt.Fprintf(sio.out, "%s %s written to %s, revision %d\n", kind, name, k.bucket, rev)
	return 0
}

func deleteCmd(ctx context.Context, args []string, sio stdio) int {
	c := newDocCommand("delete", "proxy|pool NAME [--nats-url URL]",
		"Deletes the key: the reconciler deletes a proxy's instance, the pool controller a pool's members.", sio)
	natsURL := c.fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server (credentials: "+envUser+", "+envPassword+")")
	k, kind, pos, code, ok := c.parse(args, 2, sio.errOut)
	if !ok {
		return code
	}
	name := pos[1]
	ctx, cancel := context.WithTimeout(ctx, commandBudget)
	defer cancel()
	r, kv, err := openBucket(ctx, *natsURL, "delete", k.bucket)
	if err != nil {
		fmt.Fprintln(sio.errOut, "egressd delete:", err)
		return 1
	}
	defer r.Close()
	gctx, release := r.denied.guard(ctx, k.bucket)
	defer release()
	e, err := kv.Get(gctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		fmt.Fprintf(sio.errOut, "egressd delete: no %s named %q in %s\n", kind, name, k.bucket)
		return 1
	}
	if err == nil {
		// At the revision read: a document written meanwhile is someone's newer intent.
		err = kv.Delete(gctx, name, jetstream.LastRevision(e.Revision()))
	}
	if err = denied(gctx, err); err != nil {
		fmt.Fprintf(sio.errOut, "egressd delete: %s %s: %v\n", kind, name, err)
		return 1
	}
	fmt.Fprintf(sio.out, "%s %s deleted from %s\n", kind, name, k.bucket)
	return 0
}
