package egressd_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// Budgets a reader can hold in their head: a file of at most maxFileLines lines, a function
// of at most maxFuncLines (outside tests: a test reads top to bottom as one scenario), and a
// package doc for every package, saying what it is for.
const (
	maxFileLines = 500
	maxFuncLines = 80
)

// longFuncsAllowed are functions exempted from maxFuncLines by name, with the reason. A
// validation table checks one field per line in the document's order, and reads worse cut
// into pieces.
var longFuncsAllowed = map[string]string{
	"schemas/validate.go:Validate":         "ProxySpec's validation table",
	"schemas/poolspec.go:Validate":         "PoolSpec's validation table",
	"providers/libvirt/config.go:Validate": "the libvirt provider's config validation table",
	"providers/gcp/config.go:Validate":     "the gcp provider's config validation table",
	"providers/proxmox/config.go:Validate": "the proxmox provider's config validation table",
	// A fixture is a table too: one row per case a reader must count.
	"readside/fleet/fleettest/fleettest.go:Mixed": "the mixed fleet fixture, one proxy per case",
}

// TestBudgets holds every Go file of the module to the budgets.
func TestBudgets(t *testing.T) {
	for _, v := range budgetViolations(os.DirFS("."), longFuncsAllowed) {
		t.Error(v)
	}
}

// budgetViolations walks fsys (the module's root) and returns one message per broken budget.
// Other modules (integrations, tools), testdata and hidden folders are not ours to hold.
func budgetViolations(fsys fs.FS, allowed map[string]string) []string {
	var out []string
	docs := map[string]bool{}  // package folder → has a package doc
	named := map[string]bool{} // package folder → holds a non-test file
	fset := token.NewFileSet()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" || isModule(fsys, p)) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if n := strings.Count(string(src), "\n"); n > maxFileLines {
			out = append(out, fmt.Sprintf("%s: %d lines, over the budget of %d: split it by concern", p, n, maxFileLines))
		}
		f, err := parser.ParseFile(fset, p, src, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse %s: %w", p, err)
		}
		test := strings.HasSuffix(p, "_test.go")
		dir := filepath.Dir(p)
		if !test {
			named[dir] = true
			docs[dir] = docs[dir] || f.Doc != nil
		}
		if test {
			return nil
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if _, ok := allowed[p+":"+fd.Name.Name]; n > maxFuncLines && !ok {
				out = append(out, fmt.Sprintf("%s: func %s is %d lines, over the budget of %d", p, fd.Name.Name, n, maxFuncLines))
			}
		}
		return nil
	})
	if err != nil {
		return append(out, err.Error())
	}
	for _, dir := range slices.Sorted(mapsKeys(named)) {
		if !docs[dir] {
			out = append(out, fmt.Sprintf("%s: the package has no doc comment: say what it is for in a doc.go", dir))
		}
	}
	return out
}

// isModule reports whether folder p holds a module of its own (integrations, tools).
func isModule(fsys fs.FS, p string) bool {
	_, err := fs.Stat(fsys, p+"/go.mod")
	return err == nil
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestBudgetsCatchViolations plants one violation of each budget in a made-up module, and
// keeps what the budgets allow allowed.
func TestBudgetsCatchViolations(t *testing.T) {
	lines := func(n int) string { return strings.Repeat("\n", n) }
	body := func(n int) string { return "{\n" + strings.Repeat("\t_ = 0\n", n-2) + "}\n" }
	fsys := fstest.MapFS{
		"a/doc.go":            {Data: []byte("// Package a is documented.\npackage a\n")},
		"a/long.go":           {Data: []byte("package a\n" + lines(maxFileLines))},
		"a/ok.go":             {Data: []byte("package a\n" + lines(maxFileLines-2))},
		"a/fn.go":             {Data: []byte("package a\nfunc Long() " + body(maxFuncLines+1) + "func Fits() " + body(maxFuncLines))},
		"a/table.go":          {Data: []byte("package a\nfunc Validate() " + body(maxFuncLines+10))},
		"a/a_test.go":         {Data: []byte("package a\nfunc TestLong() " + body(maxFuncLines+10))},
		"b/b.go":              {Data: []byte("package b\n")},
		"b/b_test.go":         {Data: []byte("// Package b is not documented by its test.\npackage b\n")},
		"c/only_test.go":      {Data: []byte("package c\n")},
		"other/go.mod":        {Data: []byte("module other\n")},
		"other/x.go":          {Data: []byte("package x\n" + lines(maxFileLines+1))},
		"a/testdata/big.go":   {Data: []byte("package big\n" + lines(maxFileLines+1))},
		".cache/k/huge.go":    {Data: []byte("package k\n" + lines(maxFileLines+1))},
		"a/sub/doc.go":        {Data: []byte("/*\nPackage sub is documented in a block.\n*/\npackage sub\n")},
		"a/sub/sub_long.go":   {Data: []byte("package sub\n")},
		"cmd/x/main.go":       {Data: []byte("// Command x is documented.\npackage main\n")},
		"cmd/y/main.go":       {Data: []byte("package main\n")},
		"a/table_long_ok.go":  {Data: []byte("package a\n")},
		"a/sub/not_go.txt":    {Data: []byte(lines(maxFileLines + 1))},
		"a/sub/fits_test.go":  {Data: []byte("package sub\n" + lines(maxFileLines-2))},
		"a/sub/long_test.go":  {Data: []byte("package sub\n" + lines(maxFileLines))},
		"b/second.go":         {Data: []byte("package b\n")},
		"b/third_external.go": {Data: []byte("package b\n")},
	}
	got := budgetViolations(fsys, map[string]string{"a/table.go:Validate": "a table"})
	want := []string{
		fmt.Sprintf("a/long.go: %d lines, over the budget of %d: split it by concern", maxFileLines+1, maxFileLines),
		fmt.Sprintf("a/fn.go: func Long is %d lines, over the budget of %d", maxFuncLines+1, maxFuncLines),
		fmt.Sprintf("a/sub/long_test.go: %d lines, over the budget of %d: split it by concern", maxFileLines+1, maxFileLines),
		"b: the package has no doc comment: say what it is for in a doc.go",
		"cmd/y: the package has no doc comment: say what it is for in a doc.go",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
