package events

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// The wire format of every record is pinned: a change to a field name or shape fails here
// and must be a deliberate, versioned change. -update rewrites the files.
func TestGolden(t *testing.T) {
	cases := goldenCases()
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", name)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("wire format changed:\n got %s\nwant %s", got, want)
			}
			// And the golden file decodes back to the same value.
			back := reflect.New(reflect.TypeOf(v))
			if err := json.Unmarshal(want, back.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Elem().Interface(), v) {
				t.Fatalf("round trip differs:\n%+v\n%+v", back.Elem().Interface(), v)
			}
		})
	}
}

func TestSubjects(t *testing.T) {
	cases := map[string]string{
		OpsStream("kvm-home"):             "OPS_kvm-home",
		OpsSubjects("kvm-home"):           "egress.ops.kvm-home.>",
		OpSubject("kvm-home", "h1", "p1"): "egress.ops.kvm-home.h1.p1",
		HostFilter("kvm-home", "h1"):      "egress.ops.kvm-home.h1.>",
		HostConsumer("h1"):                "host_h1",
		OpLockKey("p1"):                   "op.p1",
		EventSubject(KindPhase, "p1"):     "egress.events.phase.p1",
		OpResultSubjects:                  "egress.events.op.>",
		Op{Proxy: "p1", ID: "x"}.MsgID():  "p1:x",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// Records from a newer minor version carry fields this version does not know: our own
// records are decoded leniently, so those are ignored rather than fatal. Every golden file
// seeds the corpus, and every input is decoded as every record type.
func FuzzDecodeRecords(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no golden files: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"future":{"x":[1,2,3]}}`))
	types := recordTypes()
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, typ := range types {
			v := reflect.New(typ).Interface()
			if json.Unmarshal(b, v) != nil {
				continue
			}
			again, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("decoded %T does not encode: %v", v, err)
			}
			if err := json.Unmarshal(again, v); err != nil {
				t.Fatalf("%T does not round-trip: %v", v, err)
			}
		}
	})
}

// recordTypes are the types of the golden cases, each once, in a stable order.
func recordTypes() []reflect.Type {
	seen := map[reflect.Type]bool{}
	var out []reflect.Type
	for _, name := range slices.Sorted(maps.Keys(goldenCases())) {
		if typ := reflect.TypeOf(goldenCases()[name]); !seen[typ] {
			seen[typ] = true
			out = append(out, typ)
		}
	}
	return out
}

// Every golden file belongs to a case, so a record removed from the cases cannot leave a file
// behind that no test reads.
func TestGoldenFilesHaveCases(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := goldenCases()
	for _, f := range files {
		if _, ok := cases[filepath.Base(f)]; !ok {
			t.Errorf("%s has no case in goldenCases", f)
		}
	}
}

// The cases set every field of every struct they reach at least once (a zero field with
// omitempty would not show in any file, so its rename would go unseen), and they reach every
// struct type this package declares: a new record without a golden file fails here.
func TestGoldenCoversEveryField(t *testing.T) {
	set := map[string]bool{}
	reached := map[reflect.Type]bool{}
	for _, v := range goldenCases() {
		markSet(reflect.ValueOf(v), set)
		reachTypes(reflect.TypeOf(v), reached)
	}
	for typ := range reached {
		for f := range typ.Fields() {
			if key := typ.Name() + "." + f.Name; !set[key] {
				t.Errorf("no golden case sets %s", key)
			}
		}
	}
	byName := map[string]bool{}
	for typ := range reached {
		byName[typ.Name()] = true
	}
	for _, name := range declaredStructs(t) {
		if !byName[name] {
			t.Errorf("struct %s is in no golden case", name)
		}
	}
}

var timeType = reflect.TypeFor[time.Time]()

// markSet records, for every struct reachable from v, the fields that are not zero.
func markSet(v reflect.Value, set map[string]bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			markSet(v.Elem(), set)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			markSet(v.Index(i), set)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			markSet(it.Value(), set)
		}
	case reflect.Struct:
		if v.Type() == timeType {
			return
		}
		for i := range v.NumField() {
			if !v.Field(i).IsZero() {
				set[v.Type().Name()+"."+v.Type().Field(i).Name] = true
			}
			markSet(v.Field(i), set)
		}
	}
}

// reachTypes adds the struct types of this package reachable from typ.
func reachTypes(typ reflect.Type, reached map[reflect.Type]bool) {
	switch typ.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		reachTypes(typ.Elem(), reached)
	case reflect.Struct:
		if typ == timeType || reached[typ] {
			return
		}
		reached[typ] = true
		for f := range typ.Fields() {
			reachTypes(f.Type, reached)
		}
	}
}

// declaredStructs are the exported struct types of the package's non-test files.
func declaredStructs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() {
					out = append(out, ts.Name.Name)
				}
			}
		}
	}
	return out
}

// Kinds lists every Kind constant of event.go, so `egressd events --kind` accepts each.
func TestKindsListsEveryKind(t *testing.T) {
	src, err := os.ReadFile("event.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := regexp.MustCompile(`(?m)^\s+Kind\w+\s+EventKind = "(\w+)"`).FindAllStringSubmatch(string(src), -1)
	if len(declared) == 0 || len(declared) != len(Kinds) {
		t.Fatalf("%d kinds declared, Kinds has %d: %v", len(declared), len(Kinds), Kinds)
	}
	for _, d := range declared {
		if !slices.Contains(Kinds, EventKind(d[1])) {
			t.Errorf("kind %q is not in Kinds", d[1])
		}
	}
}
