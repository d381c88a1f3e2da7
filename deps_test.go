package egressd_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// listedPackage is the part of `go list -json` output the rules read.
type listedPackage struct {
	ImportPath   string
	Standard     bool
	Imports      []string // direct, non-test
	Deps         []string // transitive, non-test
	TestImports  []string
	XTestImports []string
	Module       *struct {
		Path string
		Main bool
	}
	Error *struct{ Err string }
}

// TestDependencyRules keeps the dependency direction of DESIGN.md §6 true for every package
// the module has now and will have: leaves stay stdlib-only, concrete providers never reach
// NATS, roles never reach each other, and only cmd/egressd wires in concrete providers.
func TestDependencyRules(t *testing.T) {
	modulePath, pkgs := goListDeps(t)
	for _, p := range pkgs {
		if p.Error != nil && p.Module != nil && p.Module.Main {
			t.Logf("%s: %s (its rules are checked on what go list could read)", p.ImportPath, p.Error.Err)
		}
	}
	for _, v := range dependencyViolations(modulePath, pkgs) {
		t.Error(v)
	}
}

func goListDeps(t *testing.T) (string, map[string]*listedPackage) {
	t.Helper()
	// -e: a package another engineer is halfway through must not hide the rest.
	cmd := exec.Command("go", "list", "-e", "-deps",
		"-json=ImportPath,Standard,Imports,Deps,TestImports,XTestImports,Module,Error", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]*listedPackage{}
	modulePath := ""
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		p := new(listedPackage)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
		if p.Module != nil && p.Module.Main {
			modulePath = p.Module.Path
		}
	}
	if modulePath == "" {
		t.Fatalf("go list found no package of the main module\n%s", stderr.Bytes())
	}
	return modulePath, pkgs
}

// dependencyViolations returns one message per broken rule, naming the offending edge or, for
// a rule on transitive dependencies, the chain of imports that leads to it.
func dependencyViolations(modulePath string, pkgs map[string]*listedPackage) []string {
	rel := func(path string) (string, bool) {
		if path == modulePath {
			return "", true
		}
		r, ok := strings.CutPrefix(path, modulePath+"/")
		return r, ok
	}
	var out []string
	report := func(rule, edge string) { out = append(out, rule+": "+strings.ReplaceAll(edge, modulePath+"/", "")) }
	// reach reports the dependencies of p that break a rule (broken returns its text), except
	// those reached only through another breaking one: one message per edge into forbidden
	// ground, not one per package behind it.
	reach := func(p *listedPackage, broken func(dep string) string) {
		for _, d := range p.Deps {
			rule := broken(d)
			if rule == "" {
				continue
			}
			chain := importChain(pkgs, p.ImportPath, d)
			if len(chain) > 2 && broken(chain[len(chain)-2]) != "" {
				continue
			}
			report(rule, strings.Join(chain, " imports "))
		}
	}
	for _, p := range sortedPackages(pkgs) {
		r, ours := rel(p.ImportPath)
		if !ours || p.Standard {
			continue
		}
		seg := strings.Split(r, "/")

		// internal/leaseauth and internal/relay also run inside every proxy (forward-proxy,
		// squid-auth; relay in the gateway too).
		if r == "events" || r == "schemas" || r == "providers" || r == "internal/leaseauth" || r == "internal/relay" {
			reach(p, func(d string) string {
				if dp := pkgs[d]; d == "C" || (dp != nil && dp.Standard) {
					return ""
				}
				return r + " may import only the standard library"
			})
		}
		// The lease service's pure parts: the selection core decides the lease order from typed
		// updates and the HTTP face speaks HTTP; neither reaches NATS, KV or the service shell
		// (workers/leaser), so each is read, changed and tested alone. Direct imports suffice:
		// events and schemas are held to the standard library above.
		if r == "workers/leaser/selection" || r == "workers/leaser/httpface" {
			for _, imp := range p.Imports {
				if dp := pkgs[imp]; imp == "C" || (dp != nil && dp.Standard) {
					continue
				}
				if ir, ok := rel(imp); ok && (ir == "events" || ir == "schemas") {
					continue
				}
				report(r+" may import only the standard library, events and schemas", p.ImportPath+" imports "+imp)
			}
		}
		if seg[0] == "providers" && len(seg) > 1 {
			reach(p, func(d string) string {
				if !strings.HasPrefix(d, "github.com/nats-io/") {
					return ""
				}
				return "a provider never depends on NATS; workers/provisioner is its only caller"
			})
		}
		if seg[0] == "workers" && len(seg) > 1 && seg[1] != "internal" {
			reach(p, func(d string) string {
				dr, ok := rel(d)
				ds := strings.Split(dr, "/")
				if !ok || ds[0] != "workers" || len(ds) < 2 || ds[1] == "internal" || ds[1] == seg[1] {
					return ""
				}
				return "roles talk only through NATS: workers/" + seg[1] + " must not depend on workers/" + ds[1]
			})
		}
		// The read side (readside/: the fleet read model, the status page, the metrics) reads
		// what the roles wrote to NATS; it never runs a role's code, and no role reads through
		// it, so either can change without the other.
		if seg[0] == "readside" || (seg[0] == "workers" && len(seg) > 1) {
			reach(p, func(d string) string {
				dr, ok := rel(d)
				ds := strings.Split(dr, "/")
				switch {
				case !ok:
					return ""
				case seg[0] == "readside" && ds[0] == "workers" && len(ds) > 1 && ds[1] != "internal":
					return "the read side never imports a role"
				case seg[0] == "workers" && ds[0] == "readside":
					return "roles never import the read side"
				}
				return ""
			})
		}
		if !within(r, "cmd/egressd") {
			reach(p, func(d string) string {
				if !otelSDK(d) {
					return ""
				}
				// The Go client is imported by crawlers: it must not pull in an exporter. Roles
				// get their TracerProvider from cmd/egressd, which reads the OTEL_* environment.
				return "only cmd/egressd installs the OpenTelemetry SDK; everything else uses the API (package tracing)"
			})
		}
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			ir, ok := rel(imp)
			is := strings.Split(ir, "/")
			// A command is a leaf: only its own sub-packages, tests included, may import its packages.
			if ok && is[0] == "cmd" && len(is) > 1 && !within(r, "cmd/"+is[1]) {
				edge := p.ImportPath + " imports " + imp
				if !slices.Contains(p.Imports, imp) {
					edge = p.ImportPath + " (in a test) imports " + imp
				}
				report("nothing imports a command's packages", edge)
			}
		}
		for _, imp := range p.Imports {
			ir, ok := rel(imp)
			is := strings.Split(ir, "/")
			// providertest and nocloud are shared by providers, not providers themselves.
			if !ok || is[0] != "providers" || len(is) < 2 || is[1] == "providertest" || is[1] == "nocloud" {
				continue
			}
			if !within(r, "cmd/egressd") && !within(r, "providers/"+is[1]) {
				report("only cmd/egressd imports concrete providers (its registry is the one place they are chosen)", p.ImportPath+" imports "+imp)
			}
		}
	}
	return out
}

// otelSDK reports whether a package is OpenTelemetry's SDK or one of its exporters, as
// opposed to the API that instrumented code imports.
func otelSDK(path string) bool {
	return strings.HasPrefix(path, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(path, "go.opentelemetry.io/otel/exporters/")
}

// within reports whether the module-relative path r is dir or below it.
func within(r, dir string) bool { return r == dir || strings.HasPrefix(r, dir+"/") }

func sortedPackages(pkgs map[string]*listedPackage) []*listedPackage {
	list := make([]*listedPackage, 0, len(pkgs))
	for _, p := range pkgs {
		list = append(list, p)
	}
	slices.SortFunc(list, func(a, b *listedPackage) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	return list
}

// importChain is the shortest chain of non-test imports from one package to another.
func importChain(pkgs map[string]*listedPackage, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 && prev[to] == "" {
		cur := queue[0]
		queue = queue[1:]
		if pkgs[cur] == nil {
			continue
		}
		for _, next := range pkgs[cur].Imports {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	if _, found := prev[to]; !found {
		return []string{from, to}
	}
	chain := []string{to}
	for at := to; prev[at] != ""; at = prev[at] {
		chain = append(chain, prev[at])
	}
	slices.Reverse(chain)
	return chain
}

// TestDependencyRulesCatchViolations runs the rules on a made-up module that breaks each of
// them once, and keeps what they allow allowed.
func TestDependencyRulesCatchViolations(t *testing.T) {
	const m = "example.com/m"
	imports := map[string][]string{
		m + "/events":                    {"fmt", "example.com/lib"},
		m + "/schemas":                   {"encoding/json"},
		m + "/providers":                 {"context"},
		m + "/providers/libvirt":         {m + "/providers", m + "/providers/libvirt/ssh", m + "/kvstore", m + "/providers/nocloud"},
		m + "/providers/nocloud":         {m + "/providers"},
		m + "/providers/libvirt/ssh":     {"net"},
		m + "/providers/providertest":    {m + "/providers"},
		m + "/kvstore":                   {m + "/events", "github.com/nats-io/nats.go", m + "/cmd/egressd/config"},
		m + "/workers":                   {m + "/kvstore"},
		m + "/workers/internal/x":        {m + "/workers/reconciler"},
		m + "/workers/reconciler":        {m + "/workers", m + "/workers/reconciler/policy"},
		m + "/workers/reconciler/policy": {"fmt"},
		m + "/workers/leaser":            {m + "/workers", m + "/workers/internal/x"},
		m + "/workers/leaser/selection":  {m + "/events", m + "/schemas", "fmt", m + "/kvstore"},
		m + "/workers/leaser/httpface":   {m + "/events", "net", "github.com/nats-io/nats.go"},
		m + "/workers/provisioner":       {m + "/workers", m + "/providers/libvirt"},
		m + "/workers/flowtest":          nil,
		m + "/readside/fleet":            {m + "/kvstore", m + "/workers/prober"},
		m + "/workers/prober":            {m + "/workers"},
		m + "/readside/metrics":          {m + "/readside/fleet"},
		m + "/workers/pools":             {m + "/workers", m + "/readside/statuspage"},
		m + "/readside/statuspage":       {m + "/kvstore"},
		m + "/cmd/egressd":               {m + "/cmd/egressd/config", m + "/providers/libvirt", m + "/workers/provisioner", otelSDKPkg},
		m + "/client":                    {m + "/tracing"},
		m + "/tracing":                   {"go.opentelemetry.io/otel", m + "/tracing/setup"},
		m + "/tracing/setup":             {otelSDKPkg},
		"go.opentelemetry.io/otel":       nil,
		otelSDKPkg:                       nil,
		m + "/cmd/egressd/config":        {"os"},
		"example.com/lib":                nil,
		"github.com/nats-io/nats.go":     {"net"},
	}
	pkgs := map[string]*listedPackage{}
	for path, imps := range imports {
		p := &listedPackage{ImportPath: path, Imports: imps}
		if strings.HasPrefix(path, m) {
			p.Module = &struct {
				Path string
				Main bool
			}{m, true}
		}
		pkgs[path] = p
	}
	for _, std := range []string{"fmt", "encoding/json", "context", "net", "os"} {
		pkgs[std] = &listedPackage{ImportPath: std, Standard: true}
	}
	pkgs[m+"/workers/flowtest"].TestImports = []string{m + "/workers/reconciler", m + "/workers/provisioner"}
	pkgs[m+"/workers/provisioner"].XTestImports = []string{m + "/providers/providertest", m + "/cmd/egressd"}
	for _, p := range pkgs {
		p.Deps = transitiveImports(pkgs, p.ImportPath)
	}

	want := []string{
		// Only the command installs an SDK; a package that reaches it is named once, by its edge.
		"only cmd/egressd installs the OpenTelemetry SDK; everything else uses the API (package tracing): tracing imports tracing/setup imports " + otelSDKPkg,
		"only cmd/egressd installs the OpenTelemetry SDK; everything else uses the API (package tracing): client imports tracing imports tracing/setup imports " + otelSDKPkg,
		"only cmd/egressd installs the OpenTelemetry SDK; everything else uses the API (package tracing): tracing/setup imports " + otelSDKPkg,
		"nothing imports a command's packages: kvstore imports cmd/egressd/config",
		"nothing imports a command's packages: workers/provisioner (in a test) imports cmd/egressd",
		"a provider never depends on NATS; workers/provisioner is its only caller: providers/libvirt imports kvstore imports github.com/nats-io/nats.go",
		"events may import only the standard library: events imports example.com/lib",
		"roles talk only through NATS: workers/leaser must not depend on workers/reconciler: workers/leaser imports workers/internal/x imports workers/reconciler",
		"only cmd/egressd imports concrete providers (its registry is the one place they are chosen): workers/provisioner imports providers/libvirt",
		// The read side may not import a role, nor lead to one; a role may not import it.
		"the read side never imports a role: readside/fleet imports workers/prober",
		"the read side never imports a role: readside/metrics imports readside/fleet imports workers/prober",
		"roles never import the read side: workers/pools imports readside/statuspage",
		// The lease selection core and the HTTP face stay off NATS, KV and the shell.
		"workers/leaser/selection may import only the standard library, events and schemas: workers/leaser/selection imports kvstore",
		"workers/leaser/httpface may import only the standard library, events and schemas: workers/leaser/httpface imports github.com/nats-io/nats.go",
	}
	got := dependencyViolations(m, pkgs)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing violation\n  %s", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("unexpected violation\n  %s", g)
		}
	}
}

const otelSDKPkg = "go.opentelemetry.io/otel/sdk/trace"

func transitiveImports(pkgs map[string]*listedPackage, from string) []string {
	seen := map[string]bool{}
	var visit func(string)
	visit = func(path string) {
		for _, imp := range pkgs[path].Imports {
			if !seen[imp] {
				seen[imp] = true
				visit(imp)
			}
		}
	}
	visit(from)
	return slices.Sorted(func(yield func(string) bool) {
		for p := range seen {
			if !yield(p) {
				return
			}
		}
	})
}
